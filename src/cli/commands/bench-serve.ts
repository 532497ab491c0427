import { availableParallelism } from 'node:os';
import { defineCommand } from '../options.js';
import { checkInteger, checkPrefillChunk, checkSeconds, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { parallelKinds } from '../../parallel/index.js';
import { benchServe, table } from '../../../bench/serve.js';

export const command = defineCommand({
  name: 'bench serve',
  summary:
    'drive `tandem serve` over HTTP with C concurrent streaming clients: TTFT, inter-token latency, tokens/s; llama.cpp beside it',
  description:
    'Starts `tandem serve MODEL` (slots = the largest concurrency) and, per concurrency level, runs that many clients, each sending --rounds streamed ' +
    'completions (greedy, --max-tokens) one after the other, each request its own --prompt-tokens token ids that differ from the first token on (so ' +
    "the server's prompt reuse does not apply: a level measures batching). With --anchors, llama.cpp (node-llama-cpp, CPU) runs the same " +
    "prompts with the same threads and as many sequences in one context. tok_s_total: all completion tokens over the level's wall time; " +
    "tok_s_per_stream: the mean of each request's tokens over its time, TTFT included. The table's 'prefill bound' is the most a level " +
    'could give over concurrency 1 if a batched decode step cost no more than one row while C prompts cost C prefills: C(P + D) / (CP + D), ' +
    'P the TTFT p50 and D (max tokens - 1) x the ITL p50 of concurrency 1. See docs/serve.md.',
  positionals: [
    {
      name: 'model',
      description: 'GGUF model (e.g. from `tandem make-model --shape tinyllama-1.1b --type q8_0`)',
      required: true,
    },
  ],
  options: {
    threads: {
      type: 'number',
      description: `compute threads for both engines (per node with --nodes), ${threadsBound} (default: all cores, shared out among --nodes)`,
    },
    nodes: {
      type: 'number',
      description:
        'serve across N local node processes (tandem serve --nodes N); llama.cpp still runs in one process',
    },
    parallel: {
      type: 'string',
      description: 'with --nodes: how the model is split (default tp)',
      choices: parallelKinds,
    },
    concurrency: {
      type: 'list',
      description: 'concurrency levels: clients at once',
      default: ['1', '2', '4', '8'],
      placeholder: 'list',
    },
    'prompt-tokens': { type: 'number', description: 'prompt length', default: 128 },
    'max-tokens': { type: 'number', description: 'tokens to generate per request', default: 64 },
    rounds: { type: 'number', description: 'requests each client sends, one after the other', default: 2 },
    repeat: {
      type: 'number',
      description:
        "runs of the level list, alternated (1, 4, 1, 4, ...); each level's best run (tok/s total) is kept, so the machine's drift does not set the levels' ratio",
      default: 1,
    },
    'prefill-chunk': {
      type: 'number',
      description:
        "tandem serve's --prefill-chunk: prompt tokens prefilled in one step beside running streams (default: the server's)",
    },
    anchors: { type: 'boolean', description: 'also run llama.cpp with as many sequences in one context' },
    timeout: {
      type: 'number',
      description: 'seconds each engine run may take (at most 2147483)',
      default: 900,
    },
    json: {
      type: 'boolean',
      description:
        'print JSON lines {"engine","concurrency","requests","ttft_ms_p50","ttft_ms_p99","itl_ms_p50","itl_ms_p99","tok_s_total","tok_s_per_stream"}',
    },
  },
  examples: [
    'tandem bench serve /tmp/tl-q8_0.gguf --threads 2 --concurrency 1,4 --anchors',
    'tandem bench serve m.gguf --concurrency 1,2 --max-tokens 16 --json',
    'tandem bench serve /tmp/tl-q8_0.gguf --nodes 2 --parallel tp --concurrency 8',
  ],
  async run({ options, positionals }) {
    const nodes =
      options.nodes === undefined ? undefined : checkInteger('bench serve', 'nodes', options.nodes, 1, 64, 2);
    if (options.parallel !== undefined && nodes === undefined)
      throw new TandemError('CLI_USAGE', 'bench serve: --parallel applies only with --nodes', {
        hint: 'add --nodes N, or drop --parallel',
      });
    const threads = checkThreads(
      'bench serve',
      options.threads ?? Math.max(1, Math.floor(availableParallelism() / (nodes ?? 1))),
    );
    checkSeconds('bench serve', 'timeout', options.timeout);
    const concurrency = options.concurrency.map((c) => {
      const n = /^\d+$/.test(c) ? Number(c) : NaN;
      if (!Number.isInteger(n) || n < 1 || n > 256) {
        throw new TandemError(
          'CLI_USAGE',
          `bench serve: --concurrency item '${c}' is not an integer in 1..256`,
          { hint: 'for example --concurrency 1,2,4,8' },
        );
      }
      return n;
    });
    const maxTokens = checkInteger('bench serve', 'max-tokens', options['max-tokens'], 1);
    const rows = await benchServe({
      model: positionals[0] as string,
      threads,
      concurrency,
      promptTokens: checkInteger('bench serve', 'prompt-tokens', options['prompt-tokens'], 1),
      maxTokens,
      rounds: checkInteger('bench serve', 'rounds', options.rounds, 1),
      repeat: checkInteger('bench serve', 'repeat', options.repeat, 1, 20),
      anchors: options.anchors,
      ...(options['prefill-chunk'] !== undefined
        ? { prefillChunk: checkPrefillChunk('bench serve', options['prefill-chunk']) }
        : {}),
      ...(nodes !== undefined ? { nodes, parallel: options.parallel ?? 'tp' } : {}),
      timeoutMs: options.timeout * 1000,
      ...(options.json ? {} : { onProgress: (line: string) => void process.stderr.write(`${line}\n`) }),
    });
    if (options.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    else process.stdout.write(table(rows, maxTokens));
    return 0;
  },
});
