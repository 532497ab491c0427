import {
  anchorsScript,
  bestAnchors,
  bestBenchRows,
  checkGoals,
  DEFAULT_SIZES,
  formatGoalTable,
  formatRow,
  parseSize,
  runAnchors,
  runFabricBench,
  withRounds,
  type Anchors,
  type BenchRow,
  type GoalCheck,
} from '../../fabric/bench.js';
import { TandemError } from '../../errors/index.js';
import { defineCommand } from '../options.js';

export const command = defineCommand({
  name: 'bench fabric',
  summary: 'fabric latency (half round trip, p50/p99) and one-way bandwidth between two processes',
  description:
    'Spawns a second process, connects it over the chosen provider and runs RDMA WRITE WITH IMMEDIATE ping-pong ' +
    '(latency) and a window of RDMA WRITEs (bandwidth) for each size. With --anchors it also runs ' +
    '../shared/anchors/run-anchors.sh fabric, alternated with ours in rounds (--rounds, default 3), and prints ' +
    "the best of each beside the other with the ratio to the goals (the machine's speed drifts between minutes), " +
    "and under each goal every round's figure of ours and the anchor's (JSON: ours_rounds, anchor_rounds).",
  options: {
    provider: {
      type: 'string',
      choices: ['shm', 'tcp', 'rdma'],
      default: 'shm',
      description:
        'fabric provider to measure (rdma: a verbs device, TANDEM_RDMA_DEVICE names one, TANDEM_RDMA_QP=uc for UC queue pairs)',
    },
    sizes: {
      type: 'list',
      placeholder: 'sizes',
      description: 'message sizes, e.g. 8,64,4K,4M (default 8 B .. 64 MiB)',
    },
    iterations: {
      type: 'number',
      default: 20000,
      description:
        'latency round trips per small size (fewer for large ones), timed after at least 1 s of untimed ones (TANDEM_BENCH_WARMUP_MS sets it)',
    },
    json: {
      type: 'boolean',
      description:
        'one JSON object per line: {"provider","op","bytes","latency_us_p50","latency_us_p99","bandwidth_MBps"}',
    },
    anchors: {
      type: 'boolean',
      description:
        'run <repo>/../shared/anchors/run-anchors.sh fabric alternated with ours, and print its figures and the goal table: ours, the anchor, the ratio (on stderr with --json)',
    },
    rounds: {
      type: 'number',
      description:
        'rounds, each the anchors (with --anchors) then ours; every figure, ours and the anchors, is the best of its rounds (default 3 with --anchors, else 1)',
    },
  },
  examples: [
    'tandem bench fabric --provider shm',
    'tandem bench fabric --provider tcp --sizes 64,4M --json',
    'tandem bench fabric --provider tcp --anchors',
    'tandem bench fabric --provider shm --sizes 8,4M --anchors --rounds 5',
    'tandem bench fabric --provider rdma --sizes 8,4194304 --json',
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
    const rounds = options.rounds ?? (options.anchors ? 3 : 1);
    if (!Number.isInteger(rounds) || rounds < 1) {
      throw new TandemError('CLI_USAGE', `bench fabric: --rounds must be a positive integer, got ${rounds}`, {
        hint: 'e.g. --rounds 3',
      });
    }
    const provider = options.provider;
    if (provider === 'rdma' && options.anchors) {
      throw new TandemError(
        'CLI_USAGE',
        'bench fabric: --anchors has no rdma anchors (UCX, sockperf and iperf3 are shm and tcp figures)',
        {
          hint: "compare rdma with perftest's ib_write_lat / ib_write_bw on the same device (npm run test:rdma prints both)",
        },
      );
    }
    const print = (r: BenchRow): void => {
      process.stdout.write((options.json ? JSON.stringify(r) : formatRow(r)) + '\n');
    };
    const script = options.anchors ? anchorsScript() : undefined;
    if (options.anchors && script === undefined)
      process.stderr.write(
        'anchors: <repo>/../shared/anchors/run-anchors.sh is absent; no anchor figures to compare with\n',
      );
    let rows: BenchRow[] = [];
    let anchors: Anchors | undefined;
    /** Each round's goals, its rows against its own anchors. */
    const perRound: GoalCheck[][] = [];
    for (let round = 1; round <= rounds; round++) {
      const of = rounds > 1 ? ` (round ${round} of ${rounds})` : '';
      let roundAnchors: Anchors | undefined;
      if (script !== undefined) {
        process.stderr.write(`anchors: running run-anchors.sh fabric${of}...\n`);
        roundAnchors = await runAnchors(script);
        anchors = bestAnchors(anchors, roundAnchors);
      }
      if (rounds > 1) process.stderr.write(`ours${of}...\n`);
      // one round: each row as it arrives; more: each round's rows on stderr, the best at the end
      const got = await runFabricBench(provider, { sizes, iterations: options.iterations }, (r) =>
        rounds === 1 ? print(r) : process.stderr.write(`  ${formatRow(r)}\n`),
      );
      rows = bestBenchRows(rows, got);
      if (roundAnchors !== undefined) perRound.push(checkGoals(provider, got, roundAnchors));
    }
    if (rounds > 1) {
      if (!options.json) process.stdout.write(`# best of ${rounds} rounds\n`);
      for (const r of rows) print(r);
    }
    if (anchors === undefined) return 0;
    // with --json, stdout keeps exactly the benchmark rows; anchors and goals go to stderr
    const out = options.json ? process.stderr : process.stdout;
    for (const a of anchors.raw) out.write(`anchor: ${JSON.stringify(a)}\n`);
    const goals = withRounds(checkGoals(provider, rows, anchors), perRound);
    if (options.json) for (const g of goals) out.write(JSON.stringify({ provider, rounds, ...g }) + '\n');
    else out.write(formatGoalTable(goals, rounds) + '\n');
    return 0;
  },
});
