import { availableParallelism } from 'node:os';
import { defineCommand } from '../options.js';
import { checkSeconds, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { benchModel, jsonLine, powerNote, table } from '../../../bench/model.js';
import { kernelsChoices } from '../../kernels/webgpu/index.js';
import { kernelsDescription } from '../webgpu-model.js';

export const command = defineCommand({
  name: 'bench model',
  summary:
    'prefill tok/s (128-token prompt), decode tok/s, J/token, TTFT and peak RSS, with llama.cpp on the same file beside it',
  description:
    "Runs tandem's engine and then llama.cpp (node-llama-cpp, CPU, its default settings) on the same GGUF file with the same threads, " +
    "each in its own process, from the same token ids, greedy. J/token is the whole machine's energy over the run (prefill included) per generated token, where its power can be read (Linux RAPL, macOS powermetrics; else stderr says why). Goals (docs/benchmarks.md): on a TinyLlama-1.1B-shaped Q8_0 model decode >= 0.8x and prefill >= 0.5x llama.cpp, peak RSS <= 1.3x the file.",
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
      description: `compute threads for both engines, ${threadsBound} (default: all cores)`,
    },
    'prompt-tokens': { type: 'number', description: 'prompt length', default: 128 },
    tokens: {
      type: 'number',
      description: 'tokens to generate (decode rate is measured after the first)',
      default: 64,
    },
    warmup: {
      type: 'number',
      description:
        "tokens of an untimed run of the same prompt in each engine's process before the timed one, so that neither is timed cold (compiling its code or GPU shaders, first touching its buffers); 0 times each process's first run, as `tandem run` meets it",
      default: 0,
    },
    'llama-cpp': {
      type: 'boolean',
      description: 'also run llama.cpp (--no-llama-cpp to skip)',
      default: true,
    },
    timeout: { type: 'number', description: 'seconds each engine may take (at most 2147483)', default: 900 },
    kernels: {
      type: 'string',
      description: `tandem's ${kernelsDescription}; with webgpu, llama.cpp runs on the same GPU through its Vulkan build`,
      choices: kernelsChoices,
    },
    json: { type: 'boolean', description: 'print JSON lines instead of a table' },
  },
  examples: [
    'tandem bench model /tmp/tl-q8_0.gguf --threads 1',
    'tandem bench model /tmp/tl-q8_0.gguf --threads 2 --json',
    'tandem bench model /tmp/tl-q8_0.gguf --kernels webgpu',
  ],
  async run({ options, positionals }) {
    const threads = checkThreads('bench model', options.threads ?? availableParallelism());
    checkSeconds('bench model', 'timeout', options.timeout);
    for (const [name, v] of [
      ['prompt-tokens', options['prompt-tokens']],
      ['tokens', options.tokens],
      ['timeout', options.timeout],
    ] as const) {
      if (!Number.isInteger(v) || v < 1)
        throw new TandemError('CLI_USAGE', `bench model: --${name} must be a positive integer, got ${v}`, {
          hint: `for example --${name} 2`,
        });
    }
    if (!Number.isInteger(options.warmup) || options.warmup < 0)
      throw new TandemError(
        'CLI_USAGE',
        `bench model: --warmup must be 0 or a positive integer, got ${options.warmup}`,
        {
          hint: 'for example --warmup 8',
        },
      );
    const { rows, fileMb } = await benchModel({
      model: positionals[0] as string,
      threads,
      promptTokens: options['prompt-tokens'],
      tokens: options.tokens,
      llamaCpp: options['llama-cpp'] as boolean,
      timeoutMs: options.timeout * 1000,
      warmup: options.warmup,
      ...(options.kernels ? { kernels: options.kernels } : {}),
    });
    if (options.json) for (const r of rows) process.stdout.write(jsonLine(r) + '\n');
    else process.stdout.write(table(rows, fileMb));
    const note = powerNote(rows);
    if (note !== undefined) process.stderr.write(`${note}\n`);
    return 0;
  },
});
