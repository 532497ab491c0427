import {
  anchorFor,
  anchorsScript,
  checkCollectiveGoals,
  DEFAULT_SIZES,
  fasterRows,
  formatRow,
  header,
  parseSize,
  runAllreduceAnchors,
  runCollectivesBench,
  type AnchorRow,
  type CollRow,
} from '../../collectives/bench.js';
import { algorithms } from '../../collectives/call.js';
import { formatGoalTable, withRounds, type GoalCheck } from '../../fabric/bench.js';
import { TandemError } from '../../errors/index.js';
import { defineCommand } from '../options.js';
import { checkLocalProvider } from '../provider-check.js';
import { checkClusterLimits } from '../../cluster/cluster-limits.js';
import type { BenchOp } from '../../collectives/bench-rank.js';

/**
 * The step every size of `op` must be a multiple of: 4 B (one f32) for every op, and 4 B x ranks
 * for all-gather and all-to-all, whose size (nccl-tests' bytes) is split into one whole share
 * of f32 values per rank (bench-rank.ts); a ragged size would time a different size than its row reports.
 */
export function sizeStep(op: BenchOp, ranks: number): number {
  return op === 'all-gather' || op === 'all-to-all' ? 4 * ranks : 4;
}

/** The default sizes (8 B .. 64 MiB, doubling), each rounded up to a multiple of sizeStep. */
export function defaultSizes(op: BenchOp, ranks: number): number[] {
  const step = sizeStep(op, ranks);
  return [...new Set(DEFAULT_SIZES.map((b) => Math.ceil(b / step) * step))];
}

/** Refuses the first size that is not a whole number of f32 values, or of them per rank for the ops that split it. */
export function checkSizes(op: BenchOp, ranks: number, sizes: readonly number[]): void {
  // Every size is a whole number of f32 values (bench-rank.ts allocates bytes / 4 of them).
  const ragged = sizes.find((b) => b % 4 !== 0);
  if (ragged !== undefined) {
    throw new TandemError(
      'CLI_USAGE',
      `bench collectives: size ${ragged} B is not a whole number of f32 values (4 B each)`,
      {
        hint: 'pass sizes that are multiples of 4 B, e.g. --sizes 8,1K,1M',
      },
    );
  }
  const step = sizeStep(op, ranks);
  const uneven = sizes.find((b) => b % step !== 0);
  if (uneven !== undefined) {
    const down = Math.floor(uneven / step) * step;
    const up = down + step;
    throw new TandemError(
      'CLI_USAGE',
      `bench collectives: size ${uneven} B does not split into whole f32 values over ${ranks} ranks: --op ${op} needs sizes that are multiples of ${step} B (4 B x ${ranks} ranks)`,
      {
        hint: `use ${down > 0 ? `${down} or ${up}` : up} instead of ${uneven} (sizes for --op ${op} --ranks ${ranks} are multiples of ${step} B)`,
        details: { size: uneven, op, ranks, multipleOf: step },
      },
    );
  }
}

export const command = defineCommand({
  name: 'bench collectives',
  summary: 'collectives time, algbw and busbw per size across N processes (like nccl-tests)',
  description:
    'Starts N rank processes over the chosen provider and times one collective per size (f32, sum), ' +
    "nccl-tests style: time is the slowest rank's average, busbw = algbw x the bus factor. With --anchors " +
    'it runs ../shared/anchors/run-anchors.sh allreduce (Open MPI) and prints its figures beside ours with the ratio, ' +
    'alternated with ours in rounds (--rounds, default 3 with --anchors), each figure the best of its rounds, ' +
    "then the goals of a 2-rank all-reduce (shm: 8 B within 3x Open MPI's time, 1 MiB busbw at least its; tcp: 1 MiB busbw at least its), " +
    "each with every round's figure of ours and Open MPI's below it (JSON: ours_rounds, anchor_rounds). " +
    'Each rank waits 60 s for the others to start and connect; TANDEM_NODE_START_MS raises that on slow or emulated machines.',
  options: {
    op: {
      type: 'string',
      choices: ['all-reduce', 'all-gather', 'reduce-scatter', 'broadcast', 'all-to-all', 'tp-exchange'],
      default: 'all-reduce',
      description:
        "the collective to time; tp-exchange: tensor parallel's sum of partial results as the nodes run it (over shm each rank writes its part into every peer's memory, then sums in one fixed order; over tcp and rdma through the communicator: 2 ranks all-reduce, more gather every part and each sums them; busbw counts the n - 1 parts each rank sends)",
    },
    ranks: { type: 'number', default: 2, description: 'number of rank processes' },
    provider: {
      type: 'string',
      choices: ['shm', 'tcp', 'rdma', 'loopback'],
      default: 'shm',
      description: 'fabric provider between the ranks (loopback: in-process, --ranks 1 only)',
    },
    algorithm: {
      type: 'string',
      choices: [...algorithms],
      description: 'force an algorithm (default: chosen per size and topology)',
    },
    sizes: {
      type: 'list',
      placeholder: 'sizes',
      description:
        'sizes, multiples of 4 B (f32 values), and of 4 B x ranks for all-gather and all-to-all (whole values per rank), e.g. 8,1K,1M,64M (default 8 B .. 64 MiB, doubling, rounded up to such multiples)',
    },
    iterations: {
      type: 'number',
      default: 1000,
      description:
        "timed calls below 1 MiB; a twentieth of it up to 16 MiB, a hundredth above (the Open MPI anchor's 1000 / 50 / 10)",
    },
    json: {
      type: 'boolean',
      description:
        'one JSON object per line: {"op","ranks","provider","algorithm","bytes","time_us","algbw_GBps","busbw_GBps"}',
    },
    rounds: {
      type: 'number',
      description:
        "rounds, each the anchor (with --anchors) then ours; every row and anchor figure is the best of its rounds (the machine's speed drifts; default 3 with --anchors, else 1)",
    },
    repeat: {
      type: 'number',
      description: 'the same as --rounds (its older name)',
    },
    anchors: {
      type: 'boolean',
      description:
        "also run Open MPI's all-reduce (run-anchors.sh allreduce), print it beside ours and, for 2 ranks, the goal ratios (on stderr with --json)",
    },
  },
  examples: [
    'tandem bench collectives --op all-reduce --ranks 2 --provider shm',
    'tandem bench collectives --ranks 4 --provider tcp --sizes 8,1M --json',
    'tandem bench collectives --ranks 2 --sizes 8,1K,1M --anchors',
    'tandem bench collectives --ranks 2 --provider tcp --sizes 1M --anchors --rounds 5',
  ],
  async run({ options }) {
    checkClusterLimits();
    const ranks = options.ranks;
    if (!Number.isInteger(ranks) || ranks < 1 || ranks > 64) {
      throw new TandemError(
        'CLI_USAGE',
        `bench collectives: --ranks must be an integer in 1..64, got ${ranks}`,
        { hint: 'e.g. --ranks 4' },
      );
    }
    if (!Number.isInteger(options.iterations) || options.iterations < 1) {
      throw new TandemError(
        'CLI_USAGE',
        `bench collectives: --iterations must be a positive integer, got ${options.iterations}`,
        { hint: 'e.g. --iterations 100' },
      );
    }
    const repeat = options.rounds ?? options.repeat ?? (options.anchors ? 3 : 1);
    if (!Number.isInteger(repeat) || repeat < 1) {
      throw new TandemError(
        'CLI_USAGE',
        `bench collectives: --rounds must be a positive integer, got ${repeat}`,
        { hint: 'e.g. --rounds 3' },
      );
    }
    if (options.provider === 'loopback' && ranks !== 1) {
      throw new TandemError(
        'CLI_USAGE',
        `bench collectives: --provider loopback connects ranks inside one process only, so it cannot run ${ranks} rank processes`,
        {
          hint: 'pass --ranks 1 with loopback, or --provider shm (or tcp) for more ranks',
        },
      );
    }
    const op = options.op;
    if (op === 'tp-exchange' && (ranks < 2 || options.algorithm)) {
      throw new TandemError(
        'CLI_USAGE',
        ranks < 2
          ? `bench collectives: --op tp-exchange sums parts between ranks, so it needs at least 2, got --ranks ${ranks}`
          : `bench collectives: --op tp-exchange has one algorithm of its own, so --algorithm ${options.algorithm} does not apply`,
        { hint: ranks < 2 ? 'pass --ranks 2 or more' : 'leave out --algorithm' },
      );
    }
    await checkLocalProvider('bench collectives', options.provider);
    const sizes = options.sizes ? options.sizes.map(parseSize) : defaultSizes(op, ranks);
    checkSizes(op, ranks, sizes);
    const script = options.anchors ? anchorsScript() : undefined;
    if (options.anchors && script === undefined)
      process.stderr.write(
        'anchors: <repo>/../shared/anchors/run-anchors.sh is absent; no Open MPI figures\n',
      );
    const compare = script !== undefined && op === 'all-reduce';
    const printHeader = (): void => {
      if (options.json) return;
      process.stdout.write(
        `# ${op}, ${ranks} ranks, ${options.provider}, f32 sum${compare ? ', Open MPI beside (same ranks, same transport kind)' : ''}${repeat > 1 ? `, best of ${repeat} alternated rounds each` : ''}\n`,
      );
      process.stdout.write(header(compare) + '\n');
    };
    const print = (r: CollRow, anchorRows: readonly AnchorRow[] | undefined): void => {
      if (options.json) process.stdout.write(JSON.stringify(r) + '\n');
      else
        process.stdout.write(
          formatRow(r, compare ? (anchorFor(anchorRows ?? [], r) ?? null) : undefined) + '\n',
        );
    };
    let anchors: AnchorRow[] | undefined;
    let rows: CollRow[] = [];
    /** Each round's goals, its rows against its own anchors. */
    const perRound: GoalCheck[][] = [];
    for (let round = 1; round <= repeat; round++) {
      const of = repeat > 1 ? ` (round ${round} of ${repeat})` : '';
      let roundAnchors: AnchorRow[] | undefined;
      if (script !== undefined) {
        process.stderr.write(`anchors: running Open MPI all-reduce (run-anchors.sh allreduce)${of}...\n`);
        roundAnchors = await runAllreduceAnchors(script);
        anchors = fasterRows(anchors ?? [], roundAnchors, (a) => `${a.btl}/${a.ranks}/${a.bytes}`);
      }
      if (repeat > 1) process.stderr.write(`ours${of}...\n`);
      else printHeader();
      const got = await runCollectivesBench(
        {
          op,
          ranks,
          provider: options.provider,
          sizes,
          iterations: options.iterations,
          ...(options.algorithm ? { algorithm: options.algorithm } : {}),
        },
        // one round: each row as it arrives; more: the best rows at the end
        (r) => {
          if (repeat === 1) print(r, anchors);
          else if (!options.json) process.stderr.write(`  ${r.bytes} B: ${r.time_us.toFixed(2)} us\n`);
        },
      );
      rows = fasterRows(rows, got, (r) => String(r.bytes));
      if (roundAnchors !== undefined) perRound.push(checkCollectiveGoals(got, roundAnchors));
    }
    if (options.json) for (const a of anchors ?? []) process.stdout.write(JSON.stringify(a) + '\n');
    if (repeat > 1) {
      printHeader();
      for (const r of rows) print(r, anchors);
    }
    // with --json, stdout keeps exactly the benchmark rows; the goals go to stderr
    const goals = anchors ? withRounds(checkCollectiveGoals(rows, anchors), perRound) : [];
    if (options.json)
      for (const g of goals) process.stderr.write(JSON.stringify({ rounds: repeat, ...g }) + '\n');
    else if (goals.length > 0) process.stdout.write(formatGoalTable(goals, repeat) + '\n');
    return 0;
  },
});
