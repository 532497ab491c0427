import { statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { defineCommand } from '../options.js';
import { checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { makeModel, planFor } from '../../engine/format/make-model.js';
import { parseRouterSkew } from '../../engine/format/router-skew.js';
import { fileTypes, modelArchs, modelShapes, type FileTypeName } from '../../engine/format/model-plan.js';

function positiveInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1 || v > 1024)
    throw new TandemError('CLI_USAGE', `make-model: --${name} must be an integer in 1..1024, got ${v}`, {
      hint: `for example --${name} 16`,
    });
  return v;
}

function mib(n: number): string {
  return `${(n / 1048576).toFixed(1)} MiB`;
}

export const command = defineCommand({
  name: 'make-model',
  summary: 'write a GGUF model with RANDOM weights and a real layout (tests, demos, benchmarks)',
  description:
    'The weights are random (seeded, N(0, 0.02)): the model loads and runs in tandem and llama.cpp but produces no meaningful text. ' +
    'Layouts and metadata follow llama.cpp (llama, qwen2 with q/k/v biases, qwen3 with q/k norms, Mixtral-style moe, qwen2moe, qwen3moe); ' +
    "q4_k_m and q5_k_m mix types the way llama.cpp's quantizer does. The vocabulary is learned from a small embedded English text.",
  positionals: [{ name: 'out', description: 'path of the .gguf file to write', required: true }],
  options: {
    arch: { type: 'string', description: 'architecture', choices: modelArchs, default: 'llama' },
    shape: { type: 'string', description: 'size preset', choices: Object.keys(modelShapes), default: 'tiny' },
    type: {
      type: 'string',
      description: 'file type (weight quantization)',
      choices: Object.keys(fileTypes),
      default: 'f32',
    },
    seed: { type: 'number', description: 'random seed for the weights', default: 0 },
    vocab: {
      type: 'string',
      description:
        'tokenizer: spm (SentencePiece, llama) or bpe (byte-level gpt2); default spm for llama/moe, bpe for qwen',
      choices: ['spm', 'bpe'],
    },
    tied: {
      type: 'boolean',
      description: 'tie the output matrix to the token embeddings (no output.weight)',
    },
    'rope-scaling': {
      type: 'string',
      description: 'llama3: Llama 3.1 RoPE scaling (rope_freqs.weight, freq base 500000); llama and moe only',
      choices: ['none', 'llama3'],
      default: 'none',
    },
    std: { type: 'number', description: 'standard deviation of the random weights', default: 0.02 },
    experts: {
      type: 'number',
      description: "mixtures of experts: routed experts per layer (default: the shape's)",
    },
    'experts-used': {
      type: 'number',
      description: "mixtures of experts: experts per token (default: the shape's)",
    },
    'router-skew': {
      type: 'string',
      description:
        'mixtures of experts: route tokens with Zipf(S) skew (zipf:S, 0 < S <= 4; expert 0 hottest, the same order in every layer) instead of near-uniformly',
      placeholder: 'zipf:S',
    },
    threads: {
      type: 'number',
      description: `worker threads generating and quantizing weights, ${threadsBound} (default: one per core)`,
    },
    json: { type: 'boolean', description: 'print a JSON summary instead of text' },
  },
  examples: [
    'tandem make-model /tmp/tiny.gguf --arch qwen3 --type q8_0',
    'tandem make-model /tmp/tl.gguf --shape tinyllama-1.1b --type q4_k_m',
    'tandem make-model /tmp/moe.gguf --arch qwen3moe --shape small --experts 16 --router-skew zipf:1.2 --type q8_0',
  ],
  async run({ options, positionals }) {
    const out = positionals[0] as string;
    const threads = checkThreads('make-model', options.threads ?? availableParallelism());
    if (!(options.std > 0 && options.std < 10)) {
      throw new TandemError('CLI_USAGE', `make-model: --std must be in (0, 10), got ${options.std}`, {
        hint: 'use a small value such as 0.02',
      });
    }
    if (!Number.isSafeInteger(options.seed) || options.seed < 0) {
      throw new TandemError(
        'CLI_USAGE',
        `make-model: --seed must be a non-negative integer, got ${options.seed}`,
        { hint: 'for example --seed 1' },
      );
    }
    const opts = {
      arch: options.arch,
      shape: options.shape,
      type: options.type as FileTypeName,
      seed: options.seed,
      tied: options.tied,
      std: options.std,
      ropeScaling: options['rope-scaling'],
      ...(options.vocab ? { vocab: options.vocab } : {}),
      ...(options.experts !== undefined ? { experts: positiveInt('experts', options.experts) } : {}),
      ...(options['experts-used'] !== undefined
        ? { expertsUsed: positiveInt('experts-used', options['experts-used']) }
        : {}),
      ...(options['router-skew'] !== undefined
        ? { routerSkew: parseRouterSkew(options['router-skew']) }
        : {}),
    };
    const plan = planFor(opts);
    const log = (s: string): void => {
      if (!options.json) process.stderr.write(s);
    };
    log(
      `writing ${out}: ${options.arch} ${options.shape} ${options.type}, ${(plan.params / 1e6).toFixed(1)}M parameters, RANDOM WEIGHTS (seed ${options.seed})\n`,
    );
    const started = Date.now();
    let lastShown = 0;
    const tty = process.stderr.isTTY;
    const { bytes } = await makeModel(out, {
      ...opts,
      threads,
      onProgress: (written, total, tensor) => {
        const now = Date.now();
        if (now - lastShown < 1000 && written < total) return;
        lastShown = now;
        const pct = ((100 * written) / total).toFixed(0).padStart(3);
        log(
          `${tty ? '\r' : ''}  ${pct}%  ${mib(written)} / ${mib(total)}  ${tensor}${tty ? '\x1b[K' : '\n'}`,
        );
      },
    });
    if (tty) log('\n');
    const seconds = (Date.now() - started) / 1000;
    const summary = {
      file: out,
      arch: options.arch,
      shape: options.shape,
      type: options.type as FileTypeName,
      seed: options.seed,
      params: plan.params,
      bytes: statSync(out).size,
      tensors: plan.tensors.length,
      vocab: plan.vocab.model,
      randomWeights: true,
      seconds,
    };
    if (options.json) process.stdout.write(JSON.stringify(summary) + '\n');
    else {
      process.stdout.write(
        `wrote ${out}: ${mib(bytes)}, ${plan.tensors.length} tensors, ${plan.vocab.tokens.length}-token ${plan.vocab.model} vocabulary, in ${seconds.toFixed(1)} s\n` +
          'note: the weights are RANDOM; the model runs but its text means nothing\n',
      );
    }
    return 0;
  },
});
