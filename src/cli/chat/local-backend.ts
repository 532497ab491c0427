import { setImmediate as nextTurn } from 'node:timers/promises';
import { loadClusterServedModel, loadServedModel, type ServedModel } from '../../api/index.js';
import type { SlotCache } from '../../api/scheduler.js';
import { startingLine } from '../../cluster/index.js';
import {
  Sampler,
  generate,
  type CachePositions,
  type ChatMessage,
  type Forwarder,
  type SamplerOptions,
} from '../../engine/index.js';
import type { ParallelKind } from '../../parallel/index.js';
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

export interface ClusterBackendOptions {
  /** N local node processes, or the nodes of a hostfile (each running `tandem node`) and their secret. */
  members: { nodes: number } | { hosts: string; secret: string };
  parallel: ParallelKind | 'auto';
  provider: 'shm' | 'tcp' | 'rdma';
  /** Compute threads per node (with a hostfile, default: each node's own). */
  threads?: number;
  /** KV positions on every node; default the model's context length, at most 4096. */
  context?: number;
  sampling: SamplerOptions;
  log: (line: string) => void;
}

/** A slot's cache as the chat drives it: positions, and cutting back to a shared start. */
type ChatCache = SlotCache & CachePositions & { truncate(length: number): void };

/** Length of the longest common start of two token lists. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * A model loaded as `tandem serve` loads it (its chat template, ChatML when the file has none;
 * its end-of-generation tokens; its context): in this process, or split across local node
 * processes (`--nodes N`, the serving path over a cluster: this process renders, tokenizes and
 * samples, the nodes hold the shards and a KV cache for the conversation). Answers go through
 * the engine's generation loop as `tandem run`'s do. One KV cache lives across turns: it holds
 * the tokens in `cached`, and an answer prefills only the part of the new prompt after the
 * longest start it shares with them (the new turn, when the template renders the earlier turns
 * as before). Invariant: cache.length === cached.length.
 */
export class LocalBackend implements ChatBackend {
  private cached: number[] = [];
  /**
   * The model's forward after a turn of the event loop: a forward on the native kernels may
   * resolve without ever yielding to I/O, and Ctrl-C (a key readline reads from stdin) must be
   * seen between two tokens to stop an answer.
   */
  private readonly forwarder: Forwarder<ChatCache>;

  private constructor(
    private readonly served: ServedModel,
    private readonly cache: ChatCache,
    private readonly sampler: Sampler,
    readonly description: string,
  ) {
    this.forwarder = {
      forward: async (tokens, cache) => {
        await nextTurn();
        return (await served.model.forward(tokens, cache, 'logits')) as Float32Array;
      },
    };
  }

  static async open(path: string, o: LocalBackendOptions): Promise<LocalBackend> {
    const served = await loadServedModel(path, {
      threads: o.threads,
      log: o.log,
      ...(o.context !== undefined ? { context: o.context } : {}),
    });
    const c = served.model.config;
    return LocalBackend.over(
      served,
      o.sampling,
      `${served.name} (${c.arch}, ${c.blockCount} layers, context ${served.contextLength} tokens) on this machine`,
      o.kvType,
    );
  }

  /** The model split across local node processes or a hostfile's nodes, as `tandem serve` runs it. */
  static async openCluster(path: string, o: ClusterBackendOptions): Promise<LocalBackend> {
    if ('nodes' in o.members) o.log(startingLine(o.members.nodes, o.threads ?? 1));
    const served = await loadClusterServedModel(path, {
      ...o.members,
      parallel: o.parallel,
      provider: o.provider,
      sequences: 1,
      log: o.log,
      ...(o.threads !== undefined ? { threads: o.threads } : {}),
      ...(o.context !== undefined ? { context: o.context } : {}),
    });
    const where =
      'nodes' in o.members
        ? `${o.members.nodes} local nodes`
        : `${served.cluster?.().members.length ?? 0} nodes of ${o.members.hosts}`;
    return LocalBackend.over(
      served,
      o.sampling,
      `${served.name} across ${where} (--parallel ${o.parallel} over ${o.provider}, context ${served.contextLength} tokens)`,
    );
  }

  private static async over(
    served: ServedModel,
    sampling: SamplerOptions,
    description: string,
    kvType?: 'f32' | 'f16',
  ): Promise<LocalBackend> {
    try {
      const cache = served.model.newSession({
        contextLength: served.contextLength,
        ...(kvType !== undefined ? { kvType } : {}),
      }) as ChatCache;
      return new LocalBackend(served, cache, new Sampler(sampling), description);
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
