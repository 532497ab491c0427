import { performance } from 'node:perf_hooks';
import { TandemError } from '../../errors/index.js';
import type { SequenceCache } from '../kv/kv-cache.js';

/** What the generation loop reads of a cache: positions filled, and how many it holds. */
export interface CachePositions {
  readonly length: number;
  readonly contextLength: number;
}

/** The part of a model the generation loop drives (a whole-model shard, or a distributed model). */
export interface Forwarder<C extends CachePositions = SequenceCache> {
  /** Runs tokens at the cache's next positions; returns the logits of the last one. */
  forward(tokens: ArrayLike<number>, cache: C): Promise<Float32Array>;
}

/** Chooses the next token from logits; `history` is the prompt plus tokens generated so far. */
export type TokenPicker = (logits: Float32Array, history: readonly number[]) => number;

export interface GenerateOptions {
  /** Tokens to generate at most. */
  maxTokens: number;
  /** Default: greedy (argmax, ties to the lower id, like llama.cpp's greedy sampler). */
  pick?: TokenPicker;
  /** Generation stops after emitting one of these (end of generation tokens). */
  stopTokens?: ReadonlySet<number>;
  /** Called with each token as soon as it is chosen (for streaming). */
  onToken?: (token: number) => void;
  /** Called with the logits of every step before a token is picked (tests compare them). */
  onLogits?: (logits: Float32Array, step: number) => void;
  signal?: AbortSignal;
}

export interface GenerateResult {
  /** Generated tokens (the prompt excluded). */
  tokens: number[];
  stopReason: 'length' | 'stop' | 'aborted';
  promptTokens: number;
  /** Prompt in to first token out. */
  ttftMs: number;
  /** Prompt tokens per second of the prefill (first token's forward). */
  prefillTokS: number;
  /** Tokens per second after the first one (0 when only one was generated). */
  decodeTokS: number;
}

export function greedy(logits: Float32Array): number {
  let best = 0;
  let bestValue = logits[0] as number;
  for (let i = 1; i < logits.length; i++) {
    const v = logits[i] as number;
    if (v > bestValue) {
      best = i;
      bestValue = v;
    }
  }
  return best;
}

/**
 * How many of `maxTokens` a generation can give in a cache of `contextLength` positions with
 * `used` already taken: a prompt of p tokens leaves contextLength - used - p + 1 (the last
 * generated token is never fed back). Callers that stop at the context with finish reason
 * `length`, as llama.cpp's server does, ask for this many; generate() itself refuses more.
 * A prompt that does not fit leaves `maxTokens` as asked, so generate() names the overflow.
 */
export function maxTokensThatFit(
  promptTokens: number,
  maxTokens: number,
  contextLength: number,
  used = 0,
): number {
  const room = contextLength - used - promptTokens + 1;
  return room >= 1 ? Math.min(maxTokens, room) : maxTokens;
}

function checkPrompt(prompt: readonly number[], maxTokens: number, cache: CachePositions): void {
  if (prompt.length === 0) {
    throw new TandemError('GENERATE_PROMPT', 'the prompt has no tokens', {
      hint: 'pass --prompt with some text or --prompt-tokens with at least one id',
    });
  }
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    throw new TandemError('GENERATE_PROMPT', `--max-tokens must be a positive integer, got ${maxTokens}`, {
      hint: 'ask for at least one token',
      details: { maxTokens },
    });
  }
  // The last generated token is never fed back, so it needs no cache position.
  const need = cache.length + prompt.length + maxTokens - 1;
  if (need > cache.contextLength) {
    throw new TandemError(
      'KV_CONTEXT_FULL',
      `${prompt.length} prompt tokens plus ${maxTokens} new ones need ${need} positions; the context holds ${cache.contextLength}`,
      {
        hint: "shorten the prompt or lower --max-tokens (or raise --context up to the model's context length)",
        details: {
          promptTokens: prompt.length,
          maxTokens,
          contextLength: cache.contextLength,
          used: cache.length,
        },
      },
    );
  }
}

/** The generation loop: prefill the prompt, then pick and feed back one token at a time. */
export async function generate<C extends CachePositions = SequenceCache>(
  model: Forwarder<C>,
  cache: C,
  prompt: readonly number[],
  options: GenerateOptions,
): Promise<GenerateResult> {
  checkPrompt(prompt, options.maxTokens, cache);
  const pick = options.pick ?? greedy;
  const history = [...prompt];
  const tokens: number[] = [];
  const start = performance.now();
  let logits = await model.forward(prompt, cache);
  const prefillMs = performance.now() - start;
  let ttftMs = 0;
  let firstAt = 0;
  let stopReason: GenerateResult['stopReason'] = 'length';
  for (let step = 0; step < options.maxTokens; step++) {
    options.onLogits?.(logits, step);
    const token = pick(logits, history);
    if (step === 0) {
      firstAt = performance.now();
      ttftMs = firstAt - start;
    }
    tokens.push(token);
    history.push(token);
    options.onToken?.(token);
    if (options.stopTokens?.has(token)) {
      stopReason = 'stop';
      break;
    }
    if (options.signal?.aborted) {
      stopReason = 'aborted';
      break;
    }
    if (step + 1 < options.maxTokens) logits = await model.forward([token], cache);
  }
  const decodeMs = performance.now() - firstAt;
  return {
    tokens,
    stopReason,
    promptTokens: prompt.length,
    ttftMs,
    prefillTokS: prompt.length / (prefillMs / 1000),
    decodeTokS: tokens.length > 1 ? (tokens.length - 1) / (decodeMs / 1000) : 0,
  };
}
