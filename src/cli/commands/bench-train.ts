import { defineCommand } from '../options.js';
import { checkInteger } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { trainShape, trainShapes } from '../../engine/train/index.js';
import { benchTrain, trainTable } from '../../../bench/train.js';
import type { GemmKind } from '../../kernels/backward/load-gemm.js';
import type { OptimizerSplit } from '../../parallel/train/index.js';

export const command = defineCommand({
  name: 'bench train',
  summary: 'the training step on 1..N local data-parallel nodes, against PyTorch CPU in the same run',
  description:
    'Runs a few updates of the shape on synthetic tokens for each node count and each thread count per node (gradients summed over --provider in buckets during the backward; --optimizer says how the nodes split the update), ' +
    "and PyTorch's CPU step of the same shape, batch and each thread count (Debian's python3-torch; skipped when missing), in alternated rounds; " +
    'keeps the fastest update of each (the first of every round is a warm-up). comm_share: the share of the step spent waiting for gradients (and, sharded, in the all-gather of the weights); overlap: the share of all-reduce time hidden behind the backward; ' +
    "cpu_ms: the least CPU time of an update (rank 0's process, all its threads; PyTorch's process), which waiting for a core on a shared machine does not inflate.",
  options: {
    nodes: { type: 'list', description: 'node counts to measure', default: ['1', '2'] },
    threads: {
      type: 'list',
      description: 'compute threads per node to measure each node count with (and PyTorch with)',
      default: ['1'],
    },
    kernels: {
      type: 'string',
      description: 'matrix products of the nodes (native: C, multi-threaded; wasm: SIMD, one thread)',
      choices: ['native', 'wasm'],
      default: 'native',
    },
    provider: {
      type: 'string',
      description:
        'fabric between the nodes (all on this host: shm shares memory, tcp goes through loopback sockets)',
      choices: ['shm', 'tcp'],
      default: 'shm',
    },
    optimizer: {
      type: 'list',
      description:
        'how 2 or more nodes split the optimizer, each measured: sharded (each node clips and updates its share of the weights, then the nodes all-gather them; ZeRO-1) or replicated (the whole gradient all-reduced, every node updates every weight)',
      default: ['sharded'],
    },
    shape: {
      type: 'string',
      description: 'model shape',
      choices: Object.keys(trainShapes),
      default: 'shipped',
    },
    batch: { type: 'number', description: 'rows per update (split over the nodes)', default: 8 },
    seq: { type: 'number', description: 'tokens per row', default: 64 },
    steps: { type: 'number', description: 'updates per round (the first is not counted)', default: 4 },
    rounds: { type: 'number', description: 'alternated rounds', default: 2 },
    'no-torch': { type: 'boolean', description: 'skip the PyTorch anchor' },
    json: {
      type: 'boolean',
      description:
        'print JSON lines {"nodes","step_ms","tokens_per_s","comm_share","overlap","threads","optimizer"} instead of a table',
    },
  },
  examples: ['tandem bench train --nodes 1,2 --json', 'tandem bench train --nodes 1,2 --threads 1,2'],
  async run({ options }) {
    const nodes = options.nodes.flatMap((n) => n.split(',')).map(Number);
    for (const n of nodes) checkInteger('bench train', 'nodes', n, 1, 16, 2);
    const threads = options.threads.flatMap((n) => n.split(',')).map(Number);
    for (const t of threads) checkInteger('bench train', 'threads', t, 1, 64, 2);
    const optimizers = options.optimizer.flatMap((x) => x.split(','));
    for (const x of optimizers)
      if (x !== 'sharded' && x !== 'replicated')
        throw new TandemError('CLI_USAGE', `bench train: --optimizer ${x} is not sharded or replicated`, {
          hint: 'pass --optimizer sharded, replicated or sharded,replicated',
        });
    const shape = trainShape(options.shape);
    const batch = checkInteger('bench train', 'batch', options.batch, 1, 1024, 8);
    if (Math.max(...nodes) > batch)
      throw new TandemError(
        'CLI_USAGE',
        `bench train: --nodes ${Math.max(...nodes)} is more than --batch ${batch} rows`,
        {
          hint: 'raise --batch or lower --nodes',
        },
      );
    const rows = await benchTrain({
      shape: options.shape,
      nodes,
      threads,
      kernels: options.kernels as GemmKind,
      provider: options.provider as 'shm' | 'tcp',
      optimizers: optimizers as OptimizerSplit[],
      batch,
      seq: checkInteger('bench train', 'seq', options.seq, 1, shape.context, 64),
      steps: checkInteger('bench train', 'steps', options.steps, 2, 100, 4),
      rounds: checkInteger('bench train', 'rounds', options.rounds, 1, 20, 2),
      noTorch: options['no-torch'],
      log: (l) => process.stderr.write(`${l}\n`),
    });
    if (options.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    else process.stdout.write(trainTable(rows));
    return 0;
  },
});
