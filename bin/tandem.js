#!/usr/bin/env node
// Entry point: runs the TypeScript sources through tsx's loader (no build step needed).
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
const code = await main(process.argv.slice(2));
process.exitCode = code;

// main() resolved, so the command is done: a handle it leaked (a socket, a timer) must not keep
// the process alive. The unref'd timer fires only if something else still holds the loop; it
// waits for stdout and stderr to drain first, so piped output is never cut short.
const exitWhenFlushed = () => {
  if (process.stdout.writableLength + process.stderr.writableLength > 0)
    setTimeout(exitWhenFlushed, 50).unref();
  else process.exit(code);
};
setTimeout(exitWhenFlushed, 500).unref();
