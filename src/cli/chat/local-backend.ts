import { setImmediate as nextTurn } from 'node:timers/promises';
import { loadServedModel, type LocalServedModel } from '../../api/index.js';
import {
  Sampler,
  generate,
  type ChatMessage,
  type Forwarder,
  type SamplerOptions,
  type SequenceCache,
} from '../../engine/index.js';
import { answerBudget, type AnswerStats, type ChatBackend } from './backend.js';

export interface LocalBackendOptions {
  threads: number;
  /** KV positions; default the model's context length, at most 4096 (as `tandem run` and `serve`). */
  context?: number;
  kvType: 'f32' | 'f16';
  sampling: SamplerOptions;
  /** Load progress lines. */
  log: (line: string) => void;
}

/** Length of the longest common start of two token lists. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * A model loaded in this process, as `tandem serve` loads it (its chat template, ChatML when
 * the file has none; its end-of-generation tokens; its context), answering through the
 * engine's generation loop as `tandem run` does. One KV cache lives across turns: the cache
 * holds the tokens in `cached`, and an answer prefills only the part of the new prompt after
 * the longest start it shares with them (the new turn, when the template renders the earlier
 * turns as before). Invariant: cache.length === cached.length.
 */
export class LocalBackend implements ChatBackend {
  readonly description: string;
  private cached: number[] = [];
  /**
   * The model's forward after a turn of the event loop: a forward on the native kernels may
   * resolve without ever yielding to I/O, and Ctrl-C (a key readline reads from stdin) must be
   * seen between two tokens to stop an answer.
   */
  private readonly forwarder: Forwarder;

  private constructor(
    private readonly served: LocalServedModel,
    private readonly cache: SequenceCache,
    private readonly sampler: Sampler,
  ) {
    this.forwarder = {
      forward: async (tokens, cache) => {
        await nextTurn();
        return served.model.forward(tokens, cache);
      },
    };
    const c = served.model.config;
    this.description = `${served.name} (${c.arch}, ${c.blockCount} layers, context ${served.contextLength} tokens) on this machine`;
  }

  static async open(path: string, o: LocalBackendOptions): Promise<LocalBackend> {
    const sampler = new Sampler(o.sampling);
    const served = await loadServedModel(path, {
      threads: o.threads,
      log: o.log,
      ...(o.context !== undefined ? { context: o.context } : {}),
    });
    try {
      const cache = served.model.newSession({ contextLength: served.contextLength, kvType: o.kvType });
      return new LocalBackend(served, cache, sampler);
    } catch (error) {
      await served.close();
      throw error;
    }
  }

  async answer(
    messages: readonly ChatMessage[],
    maxTokens: number | undefined,
    onText: (text: string) => void,
    signal: AbortSignal,
  ): Promise<AnswerStats> {
    const { served } = this;
    const prompt = served.template.encode(served.tokenizer, messages);
    const budget = answerBudget(prompt.length, maxTokens, served.contextLength);
    // at least the last prompt token is run again: its logits pick the first answer token
    const keep = Math.min(commonPrefix(this.cached, prompt), prompt.length - 1);
    this.cache.truncate(keep);
    this.cached.length = keep;
    const fresh = prompt.slice(keep);
    this.sampler.reset();
    this.sampler.accept(...prompt);
    const decoder = served.tokenizer.streamDecoder();
    let result;
    try {
      result = await generate(this.forwarder, this.cache, fresh, {
        maxTokens: budget,
        pick: (logits) => this.sampler.sample(logits),
        stopTokens: served.stopTokens,
        signal,
        onToken: (token) => {
          if (served.stopTokens.has(token)) return;
          const piece = decoder.push(token);
          if (piece !== '') onText(piece);
        },
      });
    } catch (error) {
      // how far the cache got is unknown: the next answer prefills everything
      this.cache.reset();
      this.cached = [];
      throw error;
    }
    const tail = decoder.flush();
    if (tail !== '') onText(tail);
    // the last generated token was never fed back, so the cache ends before it
    this.cached = [...prompt, ...result.tokens.slice(0, -1)];
    return {
      tokens: result.tokens.length,
      ttftMs: result.ttftMs,
      tokS: result.decodeTokS,
      finishReason: result.stopReason,
      promptTokens: prompt.length,
      prefilledTokens: fresh.length,
    };
  }

  close(): Promise<void> {
    return this.served.close();
  }
}
