import { basename } from 'node:path';
import { defineCommand } from '../options.js';
import { checkInteger } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { fileTypes, type FileTypeName } from '../../engine/format/model-plan.js';
import {
  hashTokens,
  loadCheckpoint,
  paramLayout,
  tokenizeFile,
  curveCsv,
  writeTextAtomically,
  train,
  trainingTokenizer,
  trainShape,
  trainShapes,
  writeTrainedGguf,
  type Checkpoint,
  type RunSettings,
  type StepLog,
  type TrainConfig,
  type TrainResult,
} from '../../engine/train/index.js';
import { localRanks, TRAIN_SECRET_ENV } from './train-ranks.js';
import { trainOnHosts } from './train-hosts.js';
import { clusterSecret, secretOptions } from '../secret.js';
import { curveSvg } from './train-plot.js';
import { trainRank } from '../../parallel/train/index.js';
import { gemmKinds, loadGemm, type GemmKind } from '../../kernels/backward/load-gemm.js';

function usage(message: string, hint: string): TandemError {
  return new TandemError('TRAIN_OPTIONS', `train: ${message}`, { hint });
}

function positiveNumber(name: string, v: number, max: number): number {
  if (!(v > 0 && v <= max))
    throw usage(`--${name} must be in (0, ${max}], got ${v}`, `for example --${name} 3e-3`);
  return v;
}

/** The run's settings from the options, or the checkpoint's when resuming (its data must be the same). */
function settingsFor(
  options: Record<string, unknown>,
  tokens: Int32Array,
  resume: Checkpoint | undefined,
): RunSettings {
  const dataHash = hashTokens(tokens);
  if (resume) {
    if (resume.settings.dataHash !== dataHash || resume.settings.dataTokens !== tokens.length)
      throw new TandemError(
        'TRAIN_CHECKPOINT',
        `train: the checkpoint was trained on other data (${resume.settings.dataTokens} tokens, hash ${resume.settings.dataHash}; --data has ${tokens.length}, hash ${dataHash})`,
        { hint: 'resume with the --data file the run started with' },
      );
    return resume.settings;
  }
  const shapeName = options['model-shape'] as string;
  const shape = trainShape(shapeName);
  const steps = checkInteger('train', 'steps', options.steps as number, 1, 1e7, 200);
  const seq = checkInteger('train', 'seq', options.seq as number, 1, shape.context, 64);
  if (tokens.length < seq + 2)
    throw new TandemError(
      'TRAIN_DATA',
      `train: the data holds ${tokens.length} tokens, fewer than --seq ${seq} + 2`,
      {
        hint: 'give more text, or a smaller --seq',
      },
    );
  const warmup =
    options.warmup === undefined ? Math.min(100, Math.ceil(steps / 10)) : (options.warmup as number);
  return {
    shapeName,
    shape,
    seed: checkInteger('train', 'seed', options.seed as number, 0, 2 ** 32 - 1, 1),
    steps,
    batch: checkInteger('train', 'batch', options.batch as number, 1, 4096, 8),
    seq,
    lr: positiveNumber('lr', options.lr as number, 1),
    warmup: checkInteger('train', 'warmup', warmup, 0, steps, 10),
    minLrRatio: 0.1,
    weightDecay: (options['weight-decay'] as number) >= 0 ? (options['weight-decay'] as number) : 0.1,
    clip: options.clip as number,
    dataTokens: tokens.length,
    dataHash,
  };
}

/** A process started by `--nodes`: trains its rank's rows silently; rank 0 reports and writes. */
async function runChildRank(
  cfg: TrainConfig,
  nodes: number,
  rank: number,
  rendezvous: string | undefined,
  provider: 'tcp' | 'shm',
  threads: number,
): Promise<void> {
  const secret = process.env[TRAIN_SECRET_ENV];
  if (
    rendezvous === undefined ||
    secret === undefined ||
    !(Number.isInteger(rank) && rank >= 1 && rank < nodes)
  )
    throw usage(
      '--rank is set by `tandem train --nodes` for the processes it starts',
      'run tandem train --nodes N instead',
    );
  const { onStep: _quiet, checkpoint: _rank0Writes, ...rest } = cfg;
  await trainRank(rest, { rank, size: nodes, rendezvous, secret, provider, threadsPerRank: threads });
}

/** Rank 0 of a local data-parallel run: starts the other ranks once it listens, reports, writes. */
async function runRankZero(
  cfg: TrainConfig,
  nodes: number,
  options: {
    data: string;
    kernels: string;
    threads: number;
    provider: 'tcp' | 'shm';
    resume?: string | undefined;
    'stop-after'?: number | undefined;
  },
  resumed: boolean,
): Promise<TrainResult> {
  const s = cfg.settings;
  const settingsArgs = resumed
    ? ['--resume', options.resume as string]
    : [
        ...['--model-shape', s.shapeName, '--steps', String(s.steps), '--batch', String(s.batch)],
        ...['--seq', String(s.seq), '--lr', String(s.lr), '--warmup', String(s.warmup)],
        ...['--weight-decay', String(s.weightDecay), '--clip', String(s.clip), '--seed', String(s.seed)],
      ];
  const ranks = localRanks(nodes, (rank, address) => [
    ...['--data', options.data, '--nodes', String(nodes), '--kernels', options.kernels],
    ...['--threads', String(options.threads)],
    ...['--provider', options.provider, '--json', ...settingsArgs],
    ...(options['stop-after'] !== undefined ? ['--stop-after', String(options['stop-after'])] : []),
    ...['--rank', String(rank), '--rendezvous', address],
  ]);
  try {
    const r = await trainRank(cfg, {
      rank: 0,
      size: nodes,
      rendezvous: '127.0.0.1:0',
      secret: ranks.secret,
      provider: options.provider,
      threadsPerRank: options.threads,
      onListening: (address) => ranks.start(address),
    });
    const failed = await ranks.wait(10_000);
    if (failed.length) process.stderr.write(`train: after the run, ${failed.join('; ')}\n`);
    return r;
  } finally {
    await ranks.stop();
  }
}

export const command = defineCommand({
  name: 'train',
  summary: 'train a llama on a text file (AdamW, checkpoints, resume) and write it as a GGUF',
  description:
    'Tokenizes --data with the vocabulary make-model writes for the shape (SentencePiece-style, learned from a small embedded English text; the written GGUF carries it, so `tandem run` and llama.cpp read the same tokens). ' +
    'Each update draws --batch windows of --seq + 1 tokens (a function of --seed and the step), computes the cross-entropy gradient by the llama backward pass, clips it to --clip and applies AdamW (beta 0.9/0.95, weight decay on matrices) under a linear warm-up and a cosine decay to a tenth of --lr. ' +
    'Checkpoints (weights, optimizer moments, step, loss curve) are written atomically; --resume continues a run with the settings stored in its checkpoint and reaches the loss curve of an uninterrupted run bit for bit.',
  options: {
    data: { type: 'string', description: 'UTF-8 text file to train on', required: true, placeholder: 'FILE' },
    'model-shape': {
      type: 'string',
      description: 'model size (micro: seconds, for tests; shipped: the shape of the embedded model)',
      choices: Object.keys(trainShapes),
      default: 'tiny',
    },
    steps: {
      type: 'number',
      description: 'optimizer updates in the whole run (the schedule spans them)',
      default: 200,
    },
    batch: { type: 'number', description: 'rows (windows of --seq tokens) per update', default: 8 },
    seq: { type: 'number', description: "tokens per row (at most the shape's context)", default: 64 },
    lr: { type: 'number', description: 'peak learning rate', default: 3e-3 },
    warmup: {
      type: 'number',
      description: 'updates of linear warm-up (default: a tenth of --steps, at most 100)',
    },
    'weight-decay': {
      type: 'number',
      description: "AdamW's decoupled weight decay (matrices only)",
      default: 0.1,
    },
    clip: { type: 'number', description: 'clip the gradient to this L2 norm (0: no clipping)', default: 1 },
    seed: { type: 'number', description: 'seed of the initial weights and the batches', default: 0 },
    out: {
      type: 'string',
      description: 'GGUF file to write at the end',
      default: 'trained.gguf',
      placeholder: 'FILE',
    },
    type: {
      type: 'string',
      description: 'file type of the written GGUF',
      choices: Object.keys(fileTypes),
      default: 'f32',
    },
    checkpoint: {
      type: 'string',
      description: 'checkpoint file (default: OUT with .ckpt appended)',
      placeholder: 'FILE',
    },
    'checkpoint-every': {
      type: 'number',
      description: 'write the checkpoint every N updates (and at the end)',
      default: 50,
    },
    resume: {
      type: 'string',
      description:
        'continue the run of this checkpoint (its shape and settings; --data must be the same text)',
      placeholder: 'CKPT',
    },
    'stop-after': {
      type: 'number',
      description:
        'stop after N updates of this invocation, checkpointed (the schedule still spans --steps); resume later',
    },
    kernels: {
      type: 'string',
      description:
        'matrix products: native (C compiled on this machine at first use, multi-threaded; falls back to wasm without a C compiler), wasm (SIMD, one thread) or reference (plain TypeScript, slow)',
      choices: [...gemmKinds],
      default: 'native',
    },
    threads: {
      type: 'number',
      description:
        'compute threads of each process for the native matrix products (the result does not depend on it)',
      default: 1,
    },
    curve: {
      type: 'string',
      description: 'write the loss curve (every update of the run so far) as CSV step,loss,lr to FILE',
      placeholder: 'FILE',
    },
    plot: {
      type: 'string',
      description: 'draw the loss curve (every update of the run so far) as an SVG chart to FILE (Vega-Lite)',
      placeholder: 'FILE',
    },
    nodes: {
      type: 'number',
      description:
        'train data-parallel in N local processes: each computes its share of --batch, gradients are summed by all-reduce',
      default: 1,
    },
    hosts: {
      type: 'string',
      description:
        'train data-parallel with the nodes of a hostfile, each running `tandem node` (host:port lines or an MLX JSON hostfile, as `run --hosts`): this process is rank 0, the nodes ranks 1..N in file order; they get the settings and tokens from here, and with --resume the checkpoint weights and moments (the secret: --secret-file or TANDEM_SECRET)',
      placeholder: 'FILE',
    },
    ...secretOptions,
    provider: {
      type: 'string',
      description:
        'fabric between the --nodes processes, which share this host (shm: shared memory, the cheaper in CPU; tcp: loopback sockets); --hosts always uses tcp',
      choices: ['shm', 'tcp'],
      default: 'shm',
    },
    rank: { type: 'number', description: 'internal: the rank of a process that `--nodes` started' },
    rendezvous: {
      type: 'string',
      description: 'internal: the address of rank 0 for a process that `--nodes` started',
      placeholder: 'HOST:PORT',
    },
    json: {
      type: 'boolean',
      description:
        'print JSON lines: {"step","loss","lr","tokens_per_s"} per update, then {"out","steps","final_loss"}',
    },
  },
  examples: [
    'tandem train --data notes.txt --model-shape tiny --steps 300 --out notes.gguf',
    'tandem train --data notes.txt --hosts hosts.txt --secret-file cluster.secret --out notes.gguf',
    'tandem train --data notes.txt --stop-after 100 --out notes.gguf && tandem train --data notes.txt --resume notes.gguf.ckpt --out notes.gguf',
  ],
  async run({ options }) {
    const resume = options.resume !== undefined ? await loadCheckpoint(options.resume) : undefined;
    const shape = resume ? resume.settings.shape : trainShape(options['model-shape']);
    const layout = paramLayout(shape);
    if (resume && resume.weights.length !== layout.total)
      throw new TandemError(
        'TRAIN_CHECKPOINT',
        `train: ${options.resume} holds ${resume.weights.length} parameters, its shape needs ${layout.total}`,
        {
          hint: 'the checkpoint is damaged; start again without --resume',
        },
      );
    const tokenizer = trainingTokenizer(layout);
    const seq = resume?.settings.seq ?? checkInteger('train', 'seq', options.seq, 1, shape.context, 64);
    const tokens = await tokenizeFile(options.data, tokenizer, seq);
    const settings = settingsFor(options, tokens, resume);
    const stopAfter =
      options['stop-after'] !== undefined
        ? checkInteger('train', 'stop-after', options['stop-after'], 1)
        : undefined;
    const every = checkInteger('train', 'checkpoint-every', options['checkpoint-every'], 1);
    const threads = checkInteger('train', 'threads', options.threads, 1, 256, 2);
    const say = (s: string): void => void process.stderr.write(s);
    // --nodes ranks share this host; --hosts ranks run elsewhere
    const localRanks = options.hosts === undefined ? Math.max(1, Math.floor(options.nodes)) : 1;
    const gemm = await loadGemm(
      options.kernels as GemmKind,
      threads,
      (why) => say(`train: ${why}\n`),
      localRanks * threads,
    );
    const checkpoint = options.checkpoint ?? `${options.out}.ckpt`;
    if (!options.json)
      say(
        `training ${settings.shapeName} (${(layout.total / 1e6).toFixed(2)}M parameters) on ${options.data}: ${tokens.length} tokens, ` +
          `${settings.steps} updates of ${settings.batch} x ${settings.seq} tokens${resume ? `, resuming at update ${resume.step}` : ''}\n`,
      );
    const onStep = (l: StepLog): void => {
      if (options.json) process.stdout.write(JSON.stringify(l) + '\n');
      else
        say(
          `step ${l.step}  loss ${l.loss.toFixed(4)}  lr ${l.lr.toExponential(2)}  ${l.tokens_per_s.toFixed(0)} tokens/s\n`,
        );
    };
    const cfg: TrainConfig = {
      settings,
      tokens,
      gemm,
      checkpoint,
      checkpointEvery: every,
      ...(stopAfter !== undefined ? { stopAfter } : {}),
      ...(resume ? { resume } : {}),
      onStep,
    };
    const nodes = checkInteger('train', 'nodes', options.nodes, 1, 64, 2);
    if (nodes > settings.batch)
      throw usage(
        `--nodes ${nodes} is more than --batch ${settings.batch} rows`,
        'give every node at least one row: raise --batch or lower --nodes',
      );
    if (options.rank !== undefined) {
      await runChildRank(cfg, nodes, options.rank, options.rendezvous, options.provider, threads);
      return 0;
    }
    if (options.hosts !== undefined && options.nodes !== 1)
      throw usage(
        '--hosts and --nodes both given',
        'pass --nodes N for local processes or --hosts FILE for `tandem node` agents, not both',
      );
    const r =
      options.hosts !== undefined
        ? await trainOnHosts(cfg, {
            hostfile: options.hosts,
            secret: clusterSecret('train', options),
            kernels: options.kernels as GemmKind,
            threads,
            onProgress: (line) => say(`train: ${line}\n`),
          })
        : nodes === 1
          ? await train(cfg)
          : await runRankZero(cfg, nodes, { ...options, threads }, resume !== undefined);
    const done = r.step >= settings.steps;
    if (done)
      await writeTrainedGguf(
        options.out,
        layout,
        r.weights,
        { steps: r.step, finalLoss: r.finalLoss, seed: settings.seed, data: options.data },
        options.type as FileTypeName,
      );
    if (options.curve !== undefined) await writeTextAtomically(options.curve, curveCsv(r.curve));
    if (options.plot !== undefined)
      await writeTextAtomically(
        options.plot,
        await curveSvg(r.curve, `tandem train: ${settings.shapeName} on ${basename(options.data)}`),
      );
    const summary = { out: done ? options.out : null, steps: r.step, final_loss: r.finalLoss };
    if (options.json) process.stdout.write(JSON.stringify(summary) + '\n');
    else
      say(
        done
          ? `wrote ${options.out} after ${r.step} updates (final loss ${r.finalLoss.toFixed(4)}); checkpoint ${checkpoint}\n`
          : `stopped after update ${r.step} of ${settings.steps}; resume with --resume ${checkpoint}\n`,
      );
    return 0;
  },
});
