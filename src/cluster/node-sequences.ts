import { TandemError } from '../errors/index.js';
import type { SequenceCache } from '../engine/kv/kv-cache.js';
import {
  forwardBatchOnRank,
  forwardMixedOnRank,
  forwardOnRank,
  logitsRank,
  type RankContext,
} from '../parallel/index.js';
import type { LogitsNeed } from '../engine/model/comm.js';
import { encodeRows, MAX_SEQUENCES, parseForward, parseMixed } from './sequence-wire.js';
import type { Message } from './protocol.js';

/** A node's side of serving: a KV cache per sequence id, and the forwards the coordinator drives. */
export class NodeSequences {
  private readonly caches = new Map<number, SequenceCache>();

  constructor(
    private readonly ctx: RankContext,
    private readonly contextLength: number,
  ) {}

  /** Runs a `forward`, `forward-batch` or `forward-mixed` request; the logits rank answers with the logits. */
  async step(m: Message): Promise<Message> {
    if (m.type === 'forward-mixed') return this.mixed(m);
    const r = parseForward(m, this.ctx.model.config.vocabSize);
    this.prepare(r.reset, r.keep);
    const caches = r.seqs.map((id) => this.cacheOf(id));
    this.plan(r.needs);
    const rows = r.single
      ? [await forwardOnRank(this.ctx, caches[0] as SequenceCache, r.tokens)]
      : await forwardBatchOnRank(this.ctx, caches, r.tokens);
    return this.answer(rows, r.needs);
  }

  /** A prompt piece of one sequence and a decode row of each of others in one step. */
  private async mixed(m: Message): Promise<Message> {
    const r = parseMixed(m, this.ctx.model.config.vocabSize);
    this.prepare(r.reset, r.keep);
    this.plan(r.needs);
    const rows = await forwardMixedOnRank(
      this.ctx,
      { tokens: r.prefill.tokens, cache: this.cacheOf(r.prefill.seq) },
      { tokens: r.decode.tokens, caches: r.decode.seqs.map((id) => this.cacheOf(id)) },
      r.onePass,
    );
    return this.answer(rows, r.needs);
  }

  /**
   * Before a step: the caches it resets start over, and those it keeps are cut back to their
   * first positions (checked first: a cache never holds fewer than the coordinator counts).
   */
  private prepare(reset: readonly number[], keep: readonly [number, number][]): void {
    for (const [id, positions] of keep) {
      const held = this.caches.get(id)?.length ?? 0;
      if (positions > held)
        throw new TandemError(
          'CLUSTER_PROTOCOL',
          `sequence ${id} holds ${held} positions here; the coordinator keeps ${positions}`,
          { hint: 'this is a bug: report it with the serve log' },
        );
    }
    for (const id of reset) this.cacheOf(id).reset();
    for (const [id, positions] of keep) this.cacheOf(id).truncate(positions);
  }

  /**
   * The head gathers of this step give what its rows need (a token id needs only each rank's
   * best logit): every rank of the group gets the same step, so the same plan.
   */
  private plan(needs: readonly LogitsNeed[]): void {
    this.ctx.shardComm?.planLogits?.(needs);
  }

  /** The logits rank's answer: each row as its need asks; the other ranks answer nothing. */
  private answer(rows: (Float32Array | undefined)[] | undefined, needs: readonly LogitsNeed[]): Message {
    if (this.ctx.me.rank !== logitsRank(this.ctx.plan)) return {};
    if (!rows || rows.some((row) => row === undefined))
      throw new TandemError('CLUSTER_PROTOCOL', 'the logits rank computed no logits', {
        hint: 'this is a bug: report it with the plan',
      });
    return encodeRows(rows as Float32Array[], needs);
  }

  /** Drops sequences' caches (the coordinator has no further use for them). */
  release(ids: readonly number[]): void {
    for (const id of ids) this.caches.delete(id);
  }

  private cacheOf(id: number): SequenceCache {
    let cache = this.caches.get(id);
    if (!cache) {
      if (this.caches.size >= MAX_SEQUENCES)
        throw new TandemError('CLUSTER_PROTOCOL', `a node keeps at most ${MAX_SEQUENCES} sequences`, {
          hint: 'serve with fewer --slots',
        });
      cache = this.ctx.model.newSession({ contextLength: this.contextLength });
      this.caches.set(id, cache);
    }
    return cache;
  }
}
