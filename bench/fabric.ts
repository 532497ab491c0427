// `node --import tsx bench/fabric.ts [options]` is `tandem bench fabric [options]`;
// the benchmark itself lives in src/fabric/bench.ts (src/ may not import bench/).
import { main } from '../src/cli/main.js';
import { exitWhenDone } from '../src/cli/exit.js';

exitWhenDone(await main(['bench', 'fabric', ...process.argv.slice(2)]));
