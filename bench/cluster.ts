// tandem bench cluster as a script: the same prompt on 1 node and on N local nodes.
//   npx tsx bench/cluster.ts MODEL.gguf [--nodes 2] [--parallel tp] [--provider tcp] [--wire f32] [--json]
import { main } from '../src/cli/main.js';
import { exitWhenDone } from '../src/cli/exit.js';

exitWhenDone(await main(['bench', 'cluster', ...process.argv.slice(2)]));
