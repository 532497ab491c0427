import { availableParallelism } from 'node:os';
import { defineCommand, type OptionTable, type ParsedOptions } from '../options.js';
import { clusterOptions } from '../cluster-options.js';
import { checkLocalProvider } from '../provider-check.js';
import { checkInteger, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import {
  ChatTemplate,
  GgufModelFile,
  Sampler,
  configFromMetadata,
  fullShard,
  generate,
  maxTokensThatFit,
  openModel,
  type ChatMessage,
  type OpenedModel,
  type SamplerOptions,
  type SequenceCache,
  type Tokenizer,
  type TokenPicker,
} from '../../engine/index.js';
import { runDistributedText } from '../../cluster/index.js';
import { checkClusterLimits } from '../../cluster/cluster-limits.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';
import {
  formatBytes,
  parseBytes,
  profileOfModel,
  readExpertProfile,
  shardBytes,
  writeExpertProfile,
} from '../../parallel/index.js';
import { chooseKernels, kernelsChoices } from '../../kernels/webgpu/index.js';
import { gpuRefusalFor, kernelsDescription, openGpuModel } from '../webgpu-model.js';

function usage(message: string, hint: string): TandemError {
  return new TandemError('CLI_USAGE', `run: ${message}`, { hint });
}

function parseTokenIds(items: readonly string[]): number[] {
  return items.map((s) => {
    // Decimal digits only: Number() would also take '1e3', '0x10' and ' '.
    const id = /^\d+$/.test(s) ? Number(s) : NaN;
    if (!Number.isSafeInteger(id))
      throw usage(
        `--prompt-tokens item '${s}' is not a token id`,
        'pass comma-separated non-negative integers, e.g. --prompt-tokens 1,15043,3186',
      );
    return id;
  });
}

/** The option table, apart so that the helpers below take its parsed type (`RunOptions`). */
const runOptions = {
  prompt: {
    type: 'string',
    description:
      "prompt text (tokenized with the model's tokenizer, BOS added as the model asks); without it and --prompt-tokens, read from stdin when stdin is not a terminal",
    placeholder: 'text',
  },
  'prompt-tokens': {
    type: 'list',
    description: 'prompt as comma-separated token ids instead of text',
    placeholder: 'ids',
  },
  chat: {
    type: 'boolean',
    description:
      "render --prompt as a user turn in the model's chat template (tokenizer.chat_template), ready for the assistant's reply",
  },
  system: {
    type: 'string',
    description: 'with --chat: a system message before the user turn',
    placeholder: 'text',
  },
  'max-tokens': { type: 'number', description: 'tokens to generate at most', default: 128 },
  temperature: { type: 'number', description: 'sampling temperature; 0 is greedy', default: 0.8 },
  'top-k': { type: 'number', description: 'keep the k most likely tokens (0 disables)', default: 40 },
  'top-p': { type: 'number', description: 'nucleus sampling threshold (1 disables)', default: 0.95 },
  'min-p': {
    type: 'number',
    description: 'drop tokens less likely than min-p x the most likely (0 disables)',
    default: 0.05,
  },
  'repeat-penalty': {
    type: 'number',
    description: 'penalty on recently seen tokens (1 disables)',
    default: 1,
  },
  seed: { type: 'number', description: 'random seed for sampling (default: random)' },
  threads: { type: 'number', description: `compute threads, ${threadsBound} (default: all cores)` },
  kernels: {
    type: 'string',
    description: `${kernelsDescription}. With --nodes: the local nodes' kernels (webgpu/auto: their shards on this machine's GPU); not with --hosts, where each node uses its own (\`tandem node --kernels\`)`,
    choices: kernelsChoices,
  },
  context: {
    type: 'number',
    description:
      "KV cache positions, a positive integer (default: the model's context length, at most 4096); this machine only, not with --nodes/--hosts",
  },
  'kv-type': {
    type: 'string',
    description: 'KV cache element type',
    choices: ['f32', 'f16'],
    default: 'f32',
  },
  json: {
    type: 'boolean',
    description: 'print {"tokens","text","ttft_ms","decode_tok_s"} as JSON instead of streaming text',
  },
  ...clusterOptions,
  'mem-limit': {
    type: 'string',
    description:
      'bytes each node (or this machine) may hold, e.g. 8G; stops before loading when the model and its KV cache cannot fit',
    placeholder: 'BYTES',
  },
  'expert-profile': {
    type: 'string',
    description:
      "with --nodes/--hosts and --parallel ep: place each layer's experts by this routing profile (written by --save-expert-profile), hot experts copied",
    placeholder: 'FILE',
  },
  'save-expert-profile': {
    type: 'string',
    description:
      "after the run, write each MoE layer's expert routing (the counters' decaying window) to FILE, for --expert-profile",
    placeholder: 'FILE',
  },
  ...secretOptions,
} as const satisfies OptionTable;

type RunOptions = ParsedOptions<typeof runOptions>;

/** The sampler's options from run's sampling options (chat takes the same). */
export function samplingOptions(options: {
  temperature: number;
  'top-k': number;
  'top-p': number;
  'min-p': number;
  'repeat-penalty': number;
  seed?: number | undefined;
}): SamplerOptions {
  return {
    temperature: options.temperature,
    topK: options['top-k'],
    topP: options['top-p'],
    minP: options['min-p'],
    repeatPenalty: options['repeat-penalty'],
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
  };
}

/** The prompt to run: token ids, or text (rendered in the model's chat template when `chat`). */
type Prompt = { ids: number[] } | { text: string; chat: boolean; system: string | undefined };

/**
 * The prompt options, checked in one place: exactly one of --prompt and --prompt-tokens (ids
 * parsed here); --chat and --system only with a text prompt, --system only with --chat, and
 * --chat only on this machine.
 */
function checkPrompt(options: RunOptions): Prompt {
  const { prompt: text, chat, system } = options;
  const ids = options['prompt-tokens'];
  if (ids !== undefined && text === undefined) {
    if (chat || system !== undefined)
      throw usage('--chat and --system need a text --prompt', 'for example --chat --prompt "Hello"');
    return { ids: parseTokenIds(ids) };
  }
  if (text === undefined || ids !== undefined) {
    throw usage(
      'give exactly one of --prompt and --prompt-tokens',
      'for example --prompt "Hello" or --prompt-tokens 1,2,3, or pipe the prompt on stdin (echo Hello | tandem run MODEL)',
    );
  }
  if (system !== undefined && !chat) throw usage('--system needs --chat', 'add --chat');
  if (chat && (options.nodes !== undefined || options.hosts !== undefined)) {
    throw usage(
      '--chat runs on this machine only',
      'drop --nodes/--hosts, or render the template yourself and pass --prompt',
    );
  }
  return { text, chat, system };
}

export const command = defineCommand({
  name: 'run',
  summary: 'generate text from a GGUF model on this machine, streaming it to stdout',
  description:
    'Loads the model (llama, qwen2, qwen3, Mixtral-style MoE, qwen2moe, qwen3moe; F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K weights), ' +
    'tokenizes the prompt with the tokenizer in the file (or takes token ids), and samples up to --max-tokens tokens, stopping at an end-of-generation token. ' +
    '--temperature 0 is greedy decoding, token for token what llama.cpp produces.',
  positionals: [
    {
      name: 'model',
      description: 'path of the model: a .gguf file, or a Hugging Face or MLX model folder (docs/formats.md)',
      required: true,
    },
  ],
  options: runOptions,
  examples: [
    'tandem run model.gguf --prompt "Once upon a time" --max-tokens 64',
    'tandem run model.gguf --chat --prompt "Name three colours." --temperature 0',
    'tandem run model.gguf --prompt-tokens 1,450,4996 --temperature 0 --json',
    'echo "Once upon a time" | tandem run model.gguf',
    'tandem run /models/model.gguf --hosts hosts.txt --secret-file ~/.config/tandem/cluster.secret --prompt "Hello"',
  ],
  async run({ options: given, positionals }) {
    const path = positionals[0] as string;
    refuseSecretArgument('run', given);
    const options = await withStdinPrompt(given);
    const prompt = checkPrompt(options);
    checkRunOptions(options);
    const memLimit = parseMemLimit(options['mem-limit']);
    if (options.nodes !== undefined || options.hosts !== undefined)
      return runOnNodes(path, options, memLimit, prompt);
    if (memLimit !== undefined) checkFits(path, memLimit, options.context, options['kv-type']);
    const threads = checkThreads('run', options.threads ?? availableParallelism());
    const sampler = new Sampler(samplingOptions(options));
    const opened = await openLocal(path, options, threads);
    if (!options.json) noteRandomWeights(path);
    try {
      const { model, tokenizer } = opened;
      const tokens = promptTokens(opened, prompt);
      const contextLength = Math.min(
        options.context ?? Math.min(4096, model.config.contextLength),
        model.config.contextLength,
      );
      const cache = model.newSession({ contextLength, kvType: options['kv-type'] });
      const maxTokens = maxTokensThatFit(tokens.length, options['max-tokens'], contextLength);
      if (maxTokens < options['max-tokens'] && !options.json)
        noteContext(options['max-tokens'], maxTokens, contextLength);
      sampler.accept(...tokens);
      const pick: TokenPicker = (logits) => sampler.sample(logits);
      const stream = tokenizer?.streamDecoder();
      let text = '';
      const stopTokens = new Set<number>();
      if (tokenizer)
        for (let id = 0; id < tokenizer.vocabSize; id++)
          if (tokenizer.isEndOfGeneration(id)) stopTokens.add(id);
      const result = await generate(model, cache, tokens, {
        maxTokens,
        pick,
        stopTokens,
        onToken: (token) => {
          if (!stream || stopTokens.has(token)) return;
          const piece = stream.push(token);
          text += piece;
          if (!options.json) process.stdout.write(piece);
        },
      });
      const tail = stream?.flush() ?? '';
      text += tail;
      if (options['save-expert-profile'] !== undefined)
        writeExpertProfile(options['save-expert-profile'], profileOfModel(model));
      if (options.json) {
        process.stdout.write(
          JSON.stringify({
            tokens: result.tokens,
            text,
            ttft_ms: round(result.ttftMs),
            decode_tok_s: round(result.decodeTokS),
          }) + '\n',
        );
      } else {
        process.stdout.write(tail + '\n');
        process.stderr.write(
          `\n${result.promptTokens} prompt tokens, ${result.tokens.length} generated (${result.stopReason}); ` +
            `TTFT ${result.ttftMs.toFixed(0)} ms, prefill ${result.prefillTokS.toFixed(1)} tok/s, decode ${result.decodeTokS.toFixed(1)} tok/s, ${opened.kernelsLabel(threads)}\n`,
        );
      }
      return 0;
    } finally {
      await opened.close();
    }
  },
});

/** What a run on this machine needs of its model, on the CPU backends or on WebGPU. */
interface LocalModel {
  file: GgufModelFile;
  model: Pick<OpenedModel['model'], 'config' | 'forward'> & {
    newSession(o: { contextLength: number; kvType: 'f32' | 'f16' }): SequenceCache;
  };
  tokenizer?: Tokenizer;
  /** `2 thread(s), native kernels` or `webgpu kernels on llvmpipe (...)`. */
  kernelsLabel(threads: number): string;
  close(): Promise<void>;
}

/** Opens the model on the backend --kernels chooses (docs/kernels.md). */
async function openLocal(path: string, options: RunOptions, threads: number): Promise<LocalModel> {
  const chosen = await chooseKernels(options.kernels, gpuRefusalFor(path, options.context));
  if (chosen.backend === 'webgpu') {
    const gpu = await openGpuModel(path, chosen.device);
    return { ...gpu, model: gpu, kernelsLabel: () => `webgpu kernels on ${chosen.adapter}` };
  }
  if ('note' in chosen && chosen.note !== undefined && !options.json)
    process.stderr.write(`note: ${chosen.note}\n`);
  const opened = await openModel(path, { threads, ...(chosen.backend ? { backend: chosen.backend } : {}) });
  return { ...opened, kernelsLabel: (t) => `${t} thread(s), ${opened.kernels.backend} kernels` };
}

/**
 * The options with --prompt read from stdin when neither --prompt nor --prompt-tokens is given
 * and stdin is not a terminal (`echo Hello | tandem run MODEL`, `tandem run MODEL < prompt.txt`).
 * One final newline is dropped, as `echo` and editors add it; empty input leaves no prompt.
 */
async function withStdinPrompt(options: RunOptions): Promise<RunOptions> {
  if (options.prompt !== undefined || options['prompt-tokens'] !== undefined || process.stdin.isTTY)
    return options;
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  return text === '' ? options : { ...options, prompt: text };
}

/** --max-tokens past the context: the run stops there with finish reason `length`, and says so first. */
function noteContext(asked: number, fits: number, contextLength: number): void {
  process.stderr.write(
    `note: --max-tokens ${asked} goes past the context of ${contextLength} positions; generating at most ${fits} (then finish reason length)\n`,
  );
}

/**
 * Says on stderr when the model's weights are random: `tandem make-model` writes
 * general.description starting with RANDOM WEIGHTS (src/engine/format/model-plan.ts), and its
 * text is noise by design. Only GGUF files carry it; any other path is left to the loader.
 */
function noteRandomWeights(path: string): void {
  let description: unknown;
  try {
    const file = GgufModelFile.open(path);
    try {
      description = file.meta('general.description');
    } finally {
      file.close();
    }
  } catch {
    return;
  }
  if (typeof description === 'string' && description.startsWith('RANDOM WEIGHTS'))
    process.stderr.write(
      `note: ${path} has RANDOM weights (written by \`tandem make-model\`): the text it generates means nothing\n`,
    );
}

/** The prompt as token ids: given, rendered in the chat template, or encoded with the model's tokenizer. */
function promptTokens(opened: Pick<LocalModel, 'tokenizer' | 'file'>, prompt: Prompt): number[] {
  if ('ids' in prompt) return prompt.ids;
  const { tokenizer } = opened;
  if (!prompt.chat) return tokenizer?.encode(prompt.text) ?? [];
  if (!tokenizer)
    throw usage('--chat needs the tokenizer in the model file', 'pass a GGUF file with tokenizer metadata');
  const messages: ChatMessage[] = [
    ...(prompt.system !== undefined ? [{ role: 'system', content: prompt.system }] : []),
    { role: 'user', content: prompt.text },
  ];
  const source = opened.file.meta('tokenizer.chat_template');
  return ChatTemplate.fromModel(typeof source === 'string' ? source : undefined).encode(tokenizer, messages);
}

/** --nodes / --hosts: the same run split across node processes (src/cluster). */
async function runOnNodes(
  model: string,
  options: RunOptions,
  memLimit: number | undefined,
  prompt: Prompt,
): Promise<number> {
  if (options.nodes !== undefined) await checkLocalProvider('run', options.provider);
  if (!options.json) noteRandomWeights(model);
  const r = await runDistributedText({
    model,
    ...(options.nodes !== undefined ? { nodes: options.nodes } : { hosts: options.hosts as string }),
    ...(options.parallel !== undefined ? { parallel: options.parallel } : {}),
    ...(options.tp !== undefined ? { tpSize: options.tp } : {}),
    ...(options.wire !== undefined ? { wire: options.wire } : {}),
    maxTokens: options['max-tokens'],
    sampling: samplingOptions(options),
    ...('ids' in prompt ? { promptTokens: prompt.ids } : { prompt: prompt.text }),
    ...(options.provider ? { provider: options.provider } : {}),
    ...(memLimit !== undefined ? { memLimit } : {}),
    ...(options.hosts !== undefined || options['secret-file'] !== undefined
      ? { secret: clusterSecret('run', options) }
      : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
    ...(options.kernels !== undefined ? { kernels: options.kernels } : {}),
    ...(options['expert-profile'] !== undefined
      ? { expertProfile: readExpertProfile(options['expert-profile']) }
      : {}),
    ...(options['save-expert-profile'] !== undefined
      ? { saveExpertProfile: options['save-expert-profile'] }
      : {}),
    ...(options.json
      ? {}
      : {
          onContextLimit: (asked: number, fits: number, context: number) => noteContext(asked, fits, context),
          onText: (piece: string) => void process.stdout.write(piece),
          onProgress: (line: string) => void process.stderr.write(`${line}\n`),
        }),
  });
  if (options.json) {
    process.stdout.write(
      JSON.stringify({
        tokens: r.tokens,
        text: r.text,
        ttft_ms: round(r.ttftMs),
        decode_tok_s: round(r.decodeTokS),
        nodes: r.nodes,
      }) + '\n',
    );
    return 0;
  }
  process.stdout.write('\n');
  process.stderr.write(
    `\n${r.promptTokens.length} prompt tokens, ${r.tokens.length} generated (${r.stopReason}) on ${r.nodes.length} nodes, --parallel ${r.parallel} over ${r.provider}\n`,
  );
  for (const m of r.nodes) {
    process.stderr.write(
      `  node ${m.rank}: TTFT ${m.ttftMs.toFixed(0)} ms, decode ${m.decodeTokS.toFixed(1)} tok/s, ${m.wireBytesPerToken.toFixed(0)} B/token on the wire, ${(100 * m.commShare).toFixed(0)}% of each token in communication\n`,
    );
  }
  return 0;
}

/**
 * Options that contradict each other or would be ignored. --context is refused with
 * --nodes/--hosts because the nodes size their KV cache to the model's context length
 * (src/cluster/session.ts sends no context length with a generate request).
 */
function checkRunOptions(options: RunOptions): void {
  const onNodes = options.nodes !== undefined || options.hosts !== undefined;
  if (options.nodes !== undefined && options.hosts !== undefined) {
    throw usage(
      '--nodes and --hosts both given',
      'pass --nodes N to start local node processes, or --hosts FILE to use nodes started with `tandem node`, not both',
    );
  }
  if (options.context !== undefined)
    checkInteger('run', 'context', options.context, 1, Number.MAX_SAFE_INTEGER, 2048);
  if (options.tp !== undefined) checkInteger('run', 'tp', options.tp, 1, 64, 2);
  if (options.hosts !== undefined && options.kernels !== undefined) {
    throw usage(
      '--kernels applies to runs on this machine or its local nodes (--nodes) only',
      'drop --kernels: with --hosts each node uses its own (`tandem node --kernels`)',
    );
  }
  if (onNodes && options.context !== undefined) {
    throw usage(
      '--context applies to runs on this machine only',
      "drop --context: with --nodes/--hosts every node sizes its KV cache to the model's context length",
    );
  }
  if (options.tp !== undefined && options.parallel !== 'hybrid') {
    throw usage(
      `--tp ${options.tp} needs --parallel hybrid`,
      'add --parallel hybrid (with --nodes or --hosts), or drop --tp',
    );
  }
  if (onNodes) checkClusterLimits();
  if (!onNodes) {
    const given = (['parallel', 'wire', 'secret-file', 'provider', 'expert-profile'] as const).filter(
      (k) => options[k] !== undefined,
    );
    if (given.length > 0) {
      throw usage(
        `${given.map((k) => `--${k}`).join(', ')} ${given.length > 1 ? 'apply' : 'applies'} only with --nodes or --hosts`,
        'add --nodes N (local node processes) or --hosts FILE, or drop them to run on this machine',
      );
    }
  }
}

function parseMemLimit(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const bytes = parseBytes(text);
  if (bytes === undefined || bytes <= 0)
    throw usage(`--mem-limit '${text}' is not a positive byte size`, 'for example --mem-limit 8G');
  return bytes;
}

/** --mem-limit on this machine: the model's weights and KV cache, counted as the loader will hold them, checked before loading. */
function checkFits(path: string, memLimit: number, context: number | undefined, kvType: 'f32' | 'f16'): void {
  const file = GgufModelFile.open(path);
  try {
    const config = configFromMetadata(
      (k) => file.meta(k),
      new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
    );
    const contextLength = Math.min(context ?? Math.min(4096, config.contextLength), config.contextLength);
    const need = shardBytes(config, file.tensors, fullShard(config), { contextLength, kvType });
    if (need > memLimit) {
      throw new TandemError(
        'PAR_NO_FIT',
        `run: the model needs ${formatBytes(need)} with a ${kvType} KV cache of ${contextLength} positions, more than --mem-limit ${formatBytes(memLimit)}`,
        {
          hint: 'raise --mem-limit, lower --context, use --kv-type f16, or split the model with --nodes/--hosts',
          details: { needBytes: need, memLimit, contextLength },
        },
      );
    }
  } finally {
    file.close();
  }
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}
