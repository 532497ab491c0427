import { statSync } from 'node:fs';
import { basename } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  ChatTemplate,
  openModel,
  type Model,
  type ChatMessage,
  type ModelConfig,
  type Tokenizer,
} from '../engine/index.js';
import { TandemError } from '../errors/index.js';
import type { KernelsBackend } from '../kernels/index.js';
import type { ClusterView } from '../cluster/index.js';
import { badRequest } from './errors.js';
import type { SlotModel } from './scheduler.js';
import { callsAsText, templateTools, withToolsMessage, type ChatTool } from './tools.js';

/** A loaded model as the routes use it: forward passes, tokenizer, chat template, limits. */
export interface ServedModel {
  /** The id clients name in `model` and /v1/models lists. */
  name: string;
  /** Unix seconds the model was loaded (/v1/models' `created`). */
  created: number;
  model: SlotModel & { readonly config: ModelConfig };
  tokenizer: Tokenizer;
  template: ChatTemplate;
  /** Positions each slot's KV cache holds: prompt plus generated tokens must fit. */
  contextLength: number;
  /** End-of-generation tokens: generating one ends a completion with finish_reason "stop". */
  stopTokens: ReadonlySet<number>;
  /** Served over a cluster: its members, placement and re-placements now (GET /v1/cluster). */
  cluster?: () => ClusterView;
  /** Why the model cannot answer now (a cluster that lost too many members): /health and new requests get 503. */
  problem?: () => TandemError | undefined;
  close(): Promise<void>;
}

/** A model served from this process: its forwards are the engine's, on caches in this process. */
export type LocalServedModel = Omit<ServedModel, 'model'> & { model: Model };

export interface LoadServedOptions {
  threads?: number;
  /** The CPU kernels backend; default native where it builds, else wasm. */
  backend?: KernelsBackend;
  /** KV positions per slot; default the model's context length, at most 4096 (as `tandem run`). */
  context?: number;
  /** Default: the file name without `.gguf`. */
  name?: string;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
}

/** The model's name by default: its file name without the extension. */
export function defaultModelName(path: string): string {
  return basename(path).replace(/\.gguf$/i, '');
}

/** Opens a GGUF model for serving, saying on `log` what it loads and when it is done. */
export async function loadServedModel(
  path: string,
  options: LoadServedOptions = {},
): Promise<LocalServedModel> {
  const log = options.log ?? (() => {});
  const start = performance.now();
  log(
    `loading ${path} (${(statSync(path).size / 2 ** 20).toFixed(1)} MiB)${options.threads !== undefined ? ` on ${options.threads} thread(s)` : ''}`,
  );
  // a line per tenth of the layers: a model of several GB takes a while
  let shown = 0;
  const onLayer = (loaded: number, total: number): void => {
    if (loaded < total && Math.floor((10 * loaded) / total) === shown) return;
    shown = Math.floor((10 * loaded) / total);
    log(`weights: ${loaded}/${total} layers (${((performance.now() - start) / 1000).toFixed(1)} s)`);
  };
  const opened = await openModel(path, {
    onLayer,
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
    ...(options.backend ? { backend: options.backend } : {}),
  });
  try {
    const parts = servingParts(path, opened.file, opened.tokenizer, opened.model.config, options, log);
    log(
      `loaded ${parts.config.arch}, ${parts.config.blockCount} layers, vocabulary ${parts.config.vocabSize}, context ${parts.contextLength} per slot, ${opened.kernels.backend} kernels, in ${((performance.now() - start) / 1000).toFixed(1)} s`,
    );
    return { ...parts, model: opened.model, close: () => opened.close() };
  } catch (error) {
    await opened.close();
    throw error;
  }
}

/** What serving takes from a model file besides the weights: tokenizer, chat template, stop tokens, limits. */
export type ServingParts = Omit<ServedModel, 'model' | 'close' | 'cluster' | 'problem'> & {
  config: ModelConfig;
};

/**
 * The serving parts of a model file (`meta` reads its metadata): its tokenizer (a typed
 * error when it has none), chat template (ChatML, said on `log`, when it has none), the
 * end-of-generation tokens and the context per slot.
 */
export function servingParts(
  path: string,
  file: { meta(key: string): unknown },
  tokenizer: Tokenizer | undefined,
  config: ModelConfig,
  options: LoadServedOptions,
  log: (line: string) => void,
): ServingParts {
  if (!tokenizer)
    throw new TandemError('TOKENIZER_METADATA', `${path} has no tokenizer`, {
      hint: 'serve a GGUF file with tokenizer metadata',
    });
  const source = file.meta('tokenizer.chat_template');
  const hasTemplate = typeof source === 'string' && source.trim() !== '';
  if (!hasTemplate)
    log(
      'the model has no chat template (tokenizer.chat_template): /v1/chat/completions renders messages as ChatML',
    );
  const template = ChatTemplate.fromModel(hasTemplate ? source : undefined, { fallback: 'chatml' });
  const stopTokens = new Set<number>();
  for (let id = 0; id < tokenizer.vocabSize; id++) if (tokenizer.isEndOfGeneration(id)) stopTokens.add(id);
  const contextLength = Math.min(
    options.context ?? Math.min(4096, config.contextLength),
    config.contextLength,
  );
  return {
    name: options.name ?? defaultModelName(path),
    created: Math.floor(Date.now() / 1000),
    config,
    tokenizer,
    template,
    contextLength,
    stopTokens,
  };
}

/**
 * The prompt of a chat: the messages (and the tools offered) rendered through the model's
 * template and tokenized. A template that does not read `tools` gets them in a system message;
 * one that does not read `tool_calls` gets the history's calls written into the content.
 */
export function chatPrompt(
  served: ServedModel,
  messages: readonly ChatMessage[],
  tools: readonly ChatTool[] = [],
): number[] {
  const source = served.template.source;
  let turns = /\btool_calls\b/.test(source) ? messages : callsAsText(messages);
  const readsTools = /\btools\b/.test(source);
  if (tools.length > 0 && !readsTools) turns = withToolsMessage(turns, tools);
  return served.template.encode(
    served.tokenizer,
    turns,
    tools.length > 0 && readsTools ? { variables: { tools: templateTools(tools) } } : {},
  );
}

/** Token ids of a completion prompt: text tokenized (BOS as the model asks), or ids checked against the vocabulary. */
export function completionPrompt(
  served: ServedModel,
  prompt: string | readonly number[],
  field = 'prompt',
): number[] {
  if (typeof prompt !== 'string') {
    const vocab = served.tokenizer.vocabSize;
    const bad = prompt.findIndex((id) => id >= vocab);
    if (bad >= 0)
      throw badRequest(
        `${field}[${bad}]`,
        `'${field}[${bad}]' is token id ${prompt[bad]}, outside the vocabulary of ${vocab} tokens`,
      );
    return [...prompt];
  }
  const ids = served.tokenizer.encode(prompt);
  if (ids.length === 0)
    throw badRequest('prompt', "'prompt' is empty: it has no tokens", 'send some text or token ids');
  return ids;
}

/**
 * The tokens to generate at most, checked against the context: a prompt that leaves no room,
 * or a max_tokens past the room left, is a 400 with the numbers (`promptField` names the
 * field that held the prompt). The last generated token is never fed back, so
 * prompt + maxTokens - 1 positions must fit.
 */
export function tokenBudget(
  served: ServedModel,
  promptTokens: number,
  maxTokens: number | undefined,
  promptField: 'prompt' | 'messages',
): number {
  const context = served.contextLength;
  if (promptTokens > context) {
    throw badRequest(
      promptField,
      `the prompt has ${promptTokens} tokens, more than the context of ${context} tokens`,
      "shorten the prompt, or start the server with a larger --context (up to the model's context length)",
    );
  }
  const room = context - promptTokens + 1;
  if (maxTokens === undefined) return room;
  if (maxTokens > room) {
    throw badRequest(
      'max_tokens',
      `'max_tokens' is ${maxTokens}, but the prompt's ${promptTokens} tokens leave room for ${room} in the context of ${context} tokens`,
      `ask for at most ${room} tokens or shorten the prompt`,
    );
  }
  return maxTokens;
}
