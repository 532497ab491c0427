import {
  anchorsScript,
  checkGoals,
  formatGoal,
  DEFAULT_SIZES,
  formatRow,
  parseSize,
  runAnchors,
  runFabricBench,
  type BenchRow,
} from '../../fabric/bench.js';
import { TandemError } from '../../errors/index.js';
import { defineCommand } from '../options.js';

export const command = defineCommand({
  name: 'bench fabric',
  summary: 'fabric latency (half round trip, p50/p99) and one-way bandwidth between two processes',
  description:
    'Spawns a second process, connects it over the chosen provider and runs RDMA WRITE WITH IMMEDIATE ping-pong ' +
    '(latency) and a window of RDMA WRITEs (bandwidth) for each size. With --anchors it also runs ' +
    '../shared/anchors/run-anchors.sh fabric and prints the anchor figures and the ratio to the goals.',
  options: {
    provider: {
      type: 'string',
      choices: ['shm', 'tcp'],
      default: 'shm',
      description: 'fabric provider to measure',
    },
    sizes: {
      type: 'list',
      placeholder: 'sizes',
      description: 'message sizes, e.g. 8,64,4K,4M (default 8 B .. 64 MiB)',
    },
    iterations: {
      type: 'number',
      default: 20000,
      description: 'latency round trips per small size (fewer for large ones)',
    },
    json: {
      type: 'boolean',
      description:
        'one JSON object per line: {"provider","op","bytes","latency_us_p50","latency_us_p99","bandwidth_MBps"}',
    },
    anchors: {
      type: 'boolean',
      description:
        'run <repo>/../shared/anchors/run-anchors.sh fabric and print its figures and the goal ratios (on stderr with --json)',
    },
  },
  examples: [
    'tandem bench fabric --provider shm',
    'tandem bench fabric --provider tcp --sizes 64,4M --json',
    'tandem bench fabric --provider tcp --anchors',
  ],
  async run({ options }) {
    const sizes = options.sizes ? options.sizes.map(parseSize) : DEFAULT_SIZES;
    if (!Number.isInteger(options.iterations) || options.iterations < 1) {
      throw new TandemError(
        'CLI_USAGE',
        `bench fabric: --iterations must be a positive integer, got ${options.iterations}`,
        { hint: 'e.g. --iterations 1000' },
      );
    }
    const provider = options.provider;
    const print = (r: BenchRow): void => {
      process.stdout.write((options.json ? JSON.stringify(r) : formatRow(r)) + '\n');
    };
    const rows = await runFabricBench(provider, { sizes, iterations: options.iterations }, print);
    if (!options.anchors) return 0;
    const script = anchorsScript();
    if (script === undefined) {
      process.stderr.write(
        'anchors: <repo>/../shared/anchors/run-anchors.sh is absent; no anchor figures to compare with\n',
      );
      return 0;
    }
    const anchors = await runAnchors(script);
    // with --json, stdout keeps exactly the benchmark rows; anchors and goals go to stderr
    const out = options.json ? process.stderr : process.stdout;
    for (const a of anchors.raw) out.write(`anchor: ${JSON.stringify(a)}\n`);
    for (const g of checkGoals(provider, rows, anchors)) {
      if (options.json) out.write(JSON.stringify({ provider, ...g }) + '\n');
      else process.stdout.write(formatGoal(g) + '\n');
    }
    return 0;
  },
});
