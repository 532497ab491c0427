import { readFileSync, statSync } from 'node:fs';
import { defineCommand } from '../options.js';
import { checkLocalProvider } from '../provider-check.js';
import { checkInteger, checkThreads, threadsBound } from '../checks.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';
import {
  benchCluster,
  loadHostfile,
  resolveModelPath,
  whySplitMayNotPay,
  type BenchClusterRow,
} from '../../cluster/index.js';
import { checkClusterLimits, clusterLimitsHelp } from '../../cluster/cluster-limits.js';
import { readTokenizer } from '../../engine/model/gguf-model-file.js';
import { TandemError } from '../../errors/index.js';
import { checkWire, parallelKinds } from '../../parallel/index.js';
import { kernelsChoices } from '../../kernels/webgpu/index.js';
import { kernelsDescription } from '../webgpu-model.js';
import { openPowerMeter } from '../../util/power/index.js';

/** The rows as a text table (one line per configuration). */
export function clusterTable(rows: readonly BenchClusterRow[]): string {
  const head = [
    'nodes',
    'parallel',
    'provider',
    'wire',
    'prefill tok/s',
    'decode tok/s',
    'J/token',
    'TTFT ms',
    'comm share',
    'wire B/token',
    'decode x',
    'TTFT x',
    'same tokens',
    'agreement',
    'ceiling x',
  ];
  const body = rows.map((r) => [
    String(r.nodes),
    r.nodes > 1 ? r.parallel : '-',
    r.nodes > 1 ? r.provider : '-',
    r.wire,
    r.prefill_tok_s.toFixed(1),
    r.decode_tok_s.toFixed(1),
    r.j_per_token === undefined ? '-' : r.j_per_token.toFixed(3),
    r.ttft_ms.toFixed(1),
    `${(100 * r.comm_share).toFixed(0)}%`,
    r.wire_bytes_per_token.toFixed(0),
    r.speedup_decode.toFixed(2),
    r.speedup_ttft.toFixed(2),
    r.same_tokens === undefined ? '-' : r.same_tokens ? 'yes' : 'no',
    r.agreement === undefined ? '-' : `${(100 * r.agreement).toFixed(1)}%`,
    r.decode_ceiling === undefined ? '-' : r.decode_ceiling.toFixed(2),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] as string).length)));
  return (
    [head, ...body]
      .map((cells) => cells.map((c, i) => c.padStart(widths[i] as number)).join('  '))
      .join('\n') + '\n'
  );
}

export const command = defineCommand({
  name: 'bench cluster',
  summary:
    'the same prompt on 1 node and on N nodes (local processes, 1 thread each, or --hosts): prefill, decode, J/token, TTFT, comm share, speedups',
  description:
    'Starts N local node processes plus one for the single-node reference (or uses the first N + 1 nodes of --hosts), loads the model on both, warms both up, then alternates timed runs of the same prompt (--repeat of each) and prints the best of each with the ratio. ' +
    'When the split is slower than one node, one line says why it may not pay on this model or machine. ' +
    'With --wire f16 or q8 it also measures top-1 agreement with one node over teacher-forced steps (--agreement, default 256). ' +
    "J/token is this machine's energy over a timed run per generated token (lowest of the runs), where its power can be read (Linux RAPL, macOS powermetrics; else stderr says why). " +
    "With --parallel tp it also measures the decode speedup the machine allows with free communication ('ceiling x'): one node streams the model's bytes of Q8_0 weights through its matvec, then every node streams its share at once; local nodes share one machine's memory and cores, and the matvec is bound by one or the other (--no-ceiling skips it).",
  positionals: [
    {
      name: 'model',
      description: 'GGUF model (e.g. from `tandem make-model --shape tinyllama-1.1b --type q8_0`)',
      required: true,
    },
  ],
  options: {
    nodes: { type: 'number', description: `nodes to split across, 1..64; ${clusterLimitsHelp}`, default: 2 },
    hosts: {
      type: 'string',
      description:
        'use nodes started with `tandem node` instead of local processes: a hostfile (host:port list or MLX JSON) of N + 1 nodes, the last the single-node reference',
      placeholder: 'FILE',
    },
    ...secretOptions,
    parallel: { type: 'string', description: 'how to split', choices: parallelKinds, default: 'tp' },
    provider: {
      type: 'string',
      description: 'fabric provider between nodes (rdma: a verbs device on every node, see `tandem devinfo`)',
      choices: ['shm', 'tcp', 'rdma'],
      default: 'tcp',
    },
    wire: {
      type: 'string',
      description: 'activations on the wire',
      choices: ['f32', 'f16', 'q8'],
      default: 'f32',
    },
    tp: { type: 'number', description: 'hybrid: nodes per tensor-parallel group', default: 2 },
    'prompt-tokens': { type: 'number', description: 'prompt length', default: 128 },
    tokens: { type: 'number', description: 'tokens to decode', default: 32 },
    threads: { type: 'number', description: `threads per node, ${threadsBound}`, default: 1 },
    kernels: {
      type: 'string',
      description: `the local nodes' kernels, the single-node reference's too: ${kernelsDescription}; webgpu/auto put every node's shard on this machine's GPU (tp, pp, ep and hybrid). Not with --hosts (each node uses its own \`tandem node --kernels\`)`,
      choices: kernelsChoices,
    },
    repeat: {
      type: 'number',
      description: 'timed runs of each configuration, alternated; the best counts',
      default: 3,
    },
    agreement: {
      type: 'number',
      description: 'teacher-forced steps for top-1 agreement, >= 0 (default 256 with f16/q8, 0 with f32)',
    },
    'agreement-text': {
      type: 'string',
      description:
        "teacher-force the agreement on this text file, tokenized with the model's tokenizer (its first --prompt-tokens are the prompt), and compare both runs' greedy picks; default: one node's own greedy tokens after a fixed prompt",
      placeholder: 'file',
    },
    ceiling: {
      type: 'boolean',
      description:
        'measure the decode speedup the machine allows with free communication (tp; --no-ceiling skips it)',
      default: true,
    },
    json: { type: 'boolean', description: 'print JSON lines instead of a table' },
  },
  examples: [
    'tandem bench cluster /tmp/tl.gguf --nodes 2 --parallel tp --provider shm',
    'tandem bench cluster /tmp/tl.gguf --wire q8 --json',
    'tandem bench cluster /tmp/tl.gguf --wire q8 --agreement-text README.md --repeat 1 --no-ceiling',
  ],
  async run({ options, positionals }) {
    for (const key of ['prompt-tokens', 'tokens', 'tp', 'repeat'] as const)
      checkInteger('bench cluster', key, options[key], 1);
    // The same cap as `tandem run --nodes`: each node is a process on this machine.
    checkInteger('bench cluster', 'nodes', options.nodes, 1, 64, 2);
    checkClusterLimits();
    checkThreads('bench cluster', options.threads);
    if (options.agreement !== undefined)
      checkInteger('bench cluster', 'agreement', options.agreement, 0, Number.MAX_SAFE_INTEGER, 256);
    refuseSecretArgument('bench cluster', options);
    if (options.hosts !== undefined && options.kernels !== undefined)
      throw new TandemError('CLI_USAGE', 'bench cluster: --kernels applies to local nodes only', {
        hint: 'drop --kernels: with --hosts each node uses its own (`tandem node --kernels`)',
      });
    if (options.hosts === undefined && options['secret-file'] !== undefined)
      throw new TandemError('CLI_USAGE', 'bench cluster: --secret-file applies only with --hosts', {
        hint: 'local nodes make a random secret of their own: drop --secret-file, or add --hosts FILE',
      });
    // Before any node starts: a missing model fails here, not after the nodes are up.
    const model = resolveModelPath(positionals[0] as string);
    const hosts = options.hosts === undefined ? undefined : loadHostfile(options.hosts).entries;
    const secret = hosts === undefined ? undefined : clusterSecret('bench cluster', options);
    if (hosts === undefined) await checkLocalProvider('bench cluster', options.provider);
    const textPath = options['agreement-text'];
    let agreementText: number[] | undefined;
    if (textPath !== undefined) {
      let text: string;
      try {
        text = readFileSync(textPath, 'utf8');
      } catch (e) {
        throw new TandemError(
          'INVALID_ARGUMENT',
          `bench cluster: cannot read --agreement-text '${textPath}': ${(e as Error).message}`,
          {
            hint: 'give the path of a text file',
          },
        );
      }
      const tokenizer = readTokenizer(model);
      if (tokenizer === undefined) {
        throw new TandemError(
          'INVALID_ARGUMENT',
          `bench cluster: ${model} has no tokenizer to read --agreement-text with`,
          {
            hint: 'use a GGUF file with tokenizer metadata, or leave --agreement-text out',
          },
        );
      }
      agreementText = tokenizer.encode(text);
    }
    const power = await openPowerMeter();
    const rows = await benchCluster({
      model,
      ...(power.meter ? { power: power.meter } : {}),
      nodes: options.nodes,
      ...(hosts !== undefined && secret !== undefined ? { hosts, secret } : {}),
      parallel: options.parallel,
      provider: options.provider,
      wire: checkWire(options.wire),
      tpSize: options.tp,
      promptTokens: options['prompt-tokens'],
      tokens: options.tokens,
      threads: options.threads,
      ...(options.kernels !== undefined ? { kernels: options.kernels } : {}),
      repeat: options.repeat,
      ceiling: options.ceiling,
      ...(options.agreement !== undefined ? { agreementSteps: options.agreement } : {}),
      ...(agreementText ? { agreementText } : {}),
      onProgress: (line) => {
        if (!options.json) process.stderr.write(`${line}\n`);
      },
    }).finally(() => power.meter?.close());
    const split = rows[rows.length - 1] as BenchClusterRow;
    const why = whySplitMayNotPay({
      speedup: split.speedup_decode,
      nodes: split.nodes,
      commShare: split.comm_share,
      local: hosts === undefined,
      threadsPerNode: options.threads,
      modelBytes: statSync(model).size,
      repeat: options.repeat,
    });
    if (options.json) {
      for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
      if (why) process.stderr.write(why + '\n');
    } else {
      process.stdout.write(clusterTable(rows));
      process.stdout.write(
        `best of ${options.repeat} alternated round(s) of each, after a warm-up` +
          (why ? `\n${why}\n` : '\n'),
      );
    }
    if (power.reason !== undefined) process.stderr.write(`J/token not measured: ${power.reason}\n`);
    return 0;
  },
});
