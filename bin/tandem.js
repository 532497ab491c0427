#!/usr/bin/env node
// Entry point: runs the TypeScript sources through tsx's loader (no build step needed).
import { register } from 'tsx/esm/api';

register();
// a child of a bench that must not outlive it (a no-op unless its parent asked)
(await import('../src/util/exit-with-parent.ts')).exitWithParent();
const { main } = await import('../src/cli/main.ts');
const { exitWhenDone } = await import('../src/cli/exit.ts');
exitWhenDone(await main(process.argv.slice(2)));
