import { TandemError } from '../errors/index.js';
import type { ModelConfig } from '../engine/model/config.js';
import { logitsRank } from '../parallel/index.js';
import { decodeLogits } from './sequence-wire.js';
import type { ClusterSession } from './session.js';

/**
 * A sequence as the coordinator sees it: an id every node keys its KV cache by, and how many
 * positions those caches hold. Resetting it makes the next step start the nodes' caches over.
 */
export class RemoteSequence {
  length = 0;
  /** The nodes' caches for this id start over at the next step that carries it. */
  stale = true;

  constructor(
    readonly id: number,
    readonly contextLength: number,
  ) {}

  reset(): void {
    this.length = 0;
    this.stale = true;
  }
}

/**
 * A model loaded across a cluster's nodes, driven step by step from the coordinator: the
 * forwards a single-process model offers (a prompt chunk of one sequence, a decode step of
 * several), each sent to every node at once; the nodes run their shards in lockstep and the
 * logits rank answers. Steps go one at a time (the caller awaits each), so the collectives
 * inside them pair up. After a failed step the nodes have aborted their collectives; every
 * later step fails with the first error.
 */
export class ClusterSlotModel {
  private nextId = 1;
  private broken: unknown;

  constructor(
    private readonly session: ClusterSession,
    readonly config: ModelConfig,
    private readonly contextLength: number,
    private readonly stepTimeoutMs = 120_000,
  ) {}

  newSession(options: { contextLength?: number } = {}): RemoteSequence {
    return new RemoteSequence(
      this.nextId++,
      Math.min(options.contextLength ?? this.contextLength, this.contextLength),
    );
  }

  /** Runs tokens at the sequence's next positions on every node; the logits of the last one. */
  async forward(tokens: ArrayLike<number>, seq: RemoteSequence): Promise<Float32Array> {
    const rows = await this.step('forward', [seq], Array.from(tokens));
    return rows[0] as Float32Array;
  }

  /** One decode step: tokens[t] at the next position of seqs[t]; each row's logits. */
  async forwardBatch(tokens: readonly number[], seqs: readonly RemoteSequence[]): Promise<Float32Array[]> {
    return this.step('forward-batch', seqs, [...tokens]);
  }

  private async step(
    type: 'forward' | 'forward-batch',
    seqs: readonly RemoteSequence[],
    tokens: number[],
  ): Promise<Float32Array[]> {
    if (this.broken !== undefined) throw this.broken;
    const plan = this.session.placement?.plan;
    if (!plan)
      throw new TandemError('CLUSTER_PROTOCOL', 'a serving step before load', { hint: 'load a model first' });
    const grow = type === 'forward' ? tokens.length : 1;
    for (const seq of seqs) {
      if (seq.length + grow > seq.contextLength)
        throw new TandemError(
          'KV_CONTEXT_FULL',
          `sequence ${seq.id} holds ${seq.length} positions; ${grow} more exceed its context of ${seq.contextLength}`,
          { hint: 'shorten the prompt or ask for fewer tokens' },
        );
    }
    const body = {
      seqs: seqs.map((s) => s.id),
      tokens,
      reset: seqs.filter((s) => s.stale).map((s) => s.id),
    };
    const at = logitsRank(plan);
    try {
      const replies = await Promise.all(
        this.session.clients.map((c) => c.request(type, body, this.stepTimeoutMs)),
      );
      const rows = decodeLogits(
        replies[at]?.logits,
        type === 'forward' ? 1 : seqs.length,
        this.config.vocabSize,
      );
      for (const seq of seqs) {
        seq.stale = false;
        seq.length += grow;
      }
      return rows;
    } catch (error) {
      this.broken ??= error;
      throw error;
    }
  }
}
