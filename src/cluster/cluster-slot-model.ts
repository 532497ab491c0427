import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { TandemError } from '../errors/index.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { LogitsNeed, RowResult } from '../engine/model/comm.js';
import { mixedPrefillChunk } from '../engine/model/prefill.js';
import { logitsRank } from '../parallel/index.js';
import { brokenLink, LinkDownError } from './link-down.js';
import { HEARTBEAT_MS } from './protocol.js';
import { silenceLimitMs } from './cluster-limits.js';
import { decodeRows } from './sequence-wire.js';
import type { Message } from './protocol.js';
import type { ServingCluster } from './serving-cluster.js';

/**
 * What filled a sequence's caches, in order: a prompt chunk (an array of tokens), one decode
 * step's token, or a cut back to the first `keep` positions (a reused prompt).
 */
type SequenceOp = number[] | number | { keep: number };

/**
 * The shortest history that fills the first `length` positions as `ops` left them: each op
 * whose positions are still there, in order, and after one that only partly is, the cut back
 * to where it ends. A kept position is then filled by the same forward, after the same ones,
 * as it was (its bits depend on the forward's size class and what came before, not on later
 * positions).
 */
function historyOf(ops: readonly SequenceOp[], length: number): SequenceOp[] {
  // the positions each op still fills: [start, end) of the op's [start, start + its size)
  const held: { op: number[] | number; start: number; end: number; size: number }[] = [];
  const cut = (k: number): void => {
    while (held.length > 0 && (held.at(-1) as { start: number }).start >= k) held.pop();
    const last = held.at(-1);
    if (last && last.end > k) last.end = k;
  };
  let at = 0;
  for (const op of ops) {
    if (typeof op === 'object' && !Array.isArray(op)) {
      cut(op.keep);
      at = op.keep;
    } else {
      const size = Array.isArray(op) ? op.length : 1;
      held.push({ op, start: at, end: at + size, size });
      at += size;
    }
  }
  cut(length);
  const out: SequenceOp[] = [];
  for (const h of held) {
    out.push(h.op);
    if (h.end < h.start + h.size) out.push({ keep: h.end });
  }
  return out;
}

/**
 * A sequence as the coordinator sees it: an id every node keys its KV cache by, how many
 * positions those caches hold, and the forwards that filled them (to fill them again on other
 * nodes). Resetting it makes the next step start the nodes' caches over; truncating it makes
 * the next step cut them back.
 */
export class RemoteSequence {
  length = 0;
  /** The nodes' caches for this id start over at the next step that carries it. */
  stale = true;
  /** The nodes' caches are cut back to this many positions at the next step that carries it. */
  keep: number | undefined;
  /**
   * The current placement does not hold this sequence's caches yet: a prompt kept in an idle
   * slot is filled from `ops` before the next step that carries it, not when the cluster heals.
   */
  unplaced = false;
  /** What filled the caches (SequenceOp), replayed in order on a new placement. */
  readonly ops: SequenceOp[] = [];

  constructor(
    readonly id: number,
    readonly contextLength: number,
  ) {}

  reset(): void {
    this.length = 0;
    this.stale = true;
    this.keep = undefined;
    this.unplaced = false;
    this.ops.length = 0;
  }

  /**
   * Keeps the first `length` positions (a prompt that starts as this sequence's did): the
   * nodes cut their caches at the next step, and the history becomes what a replay needs to
   * fill those positions with the bits they have now (historyOf).
   */
  truncate(length: number): void {
    if (!(Number.isInteger(length) && length >= 0 && length <= this.length))
      throw new TandemError(
        'CLUSTER_PROTOCOL',
        `cannot cut sequence ${this.id} of ${this.length} positions back to ${length}`,
        { hint: 'this is a bug: report it' },
      );
    if (length === this.length) return;
    this.length = length;
    if (!this.stale && !this.unplaced) this.keep = length;
    const history = historyOf(this.ops, length);
    this.ops.length = 0;
    this.ops.push(...history);
  }
}

/** How long a step may wait for the cluster to heal (re-placement and replay) before it fails. */
const HEAL_DEADLINE_MS = 60_000;
/**
 * A killed member's peers may report their link to it before its control connection is seen
 * to close: a link failure waits this long for a loss to show before it is taken for a link
 * down between two live members.
 */
const LOSS_GRACE_MS = 500;

/**
 * A model loaded across a cluster's nodes, driven step by step from the coordinator: the
 * forwards a single-process model offers (a prompt chunk of one sequence, a decode step of
 * several, or both in one mixed step), each sent to every node at once; the nodes run their
 * shards in lockstep and the logits rank answers. Steps go one at a time (the caller awaits
 * each), so the collectives inside them pair up.
 *
 * When a member is lost during a step, the step does not fail: the model is re-placed on the
 * survivors, every sequence's caches are filled again by replaying its forwards in the same
 * shapes (prompt chunks, and the pieces of mixed steps, as chunks; decode tokens as batch
 * rows, which give a lone token's bits), and the step runs again. The caller sees a slower step with the logits it would have
 * had. A member that joins is placed the same way between two steps. A step fails when no
 * placement is found within a minute (too few members or too little memory left).
 */
export class ClusterSlotModel {
  private nextId = 1;
  private broken: unknown;
  private readonly sequences = new Set<RemoteSequence>();
  /** Milliseconds each heal took, from the failed step to the replayed caches. */
  readonly heals: number[] = [];

  constructor(
    private readonly cluster: ServingCluster,
    readonly config: ModelConfig,
    private readonly contextLength: number,
    private readonly stepTimeoutMs = 120_000,
  ) {}

  /**
   * Why the model cannot answer now: placed nowhere (too few members or too little memory:
   * new requests get 503 until a member joins), or a failure that ended serving.
   */
  problem(): TandemError | undefined {
    const b = this.broken;
    if (b === undefined) return this.cluster.placed ? undefined : this.cluster.waiting;
    return b instanceof TandemError
      ? b
      : new TandemError('CLUSTER_NODE_FAILED', `serving over the cluster failed: ${String(b)}`, {
          hint: 'restart tandem serve',
        });
  }

  /**
   * Prompt tokens per piece beside running streams: two of the GEMM lane groups that every node
   * of the placement names (mixedPrefillChunk), so a piece leaves no lanes idle on any of them.
   */
  get mixedChunk(): number {
    return mixedPrefillChunk(this.cluster.session.gemmGroup);
  }

  newSession(options: { contextLength?: number } = {}): RemoteSequence {
    const seq = new RemoteSequence(
      this.nextId++,
      Math.min(options.contextLength ?? this.contextLength, this.contextLength),
    );
    this.sequences.add(seq);
    return seq;
  }

  /**
   * Runs tokens at the sequence's next positions on every node; the last one's row as `need`
   * asks (default its logits; only those cross the wire).
   */
  async forward(
    tokens: ArrayLike<number>,
    seq: RemoteSequence,
    need: LogitsNeed = 'logits',
  ): Promise<RowResult> {
    const rows = await this.step({ prefill: { seq, tokens: Array.from(tokens), need } });
    return rows[0];
  }

  /** One decode step: tokens[t] at the next position of seqs[t]; each row as needs[t] asks (default its logits). */
  async forwardBatch(
    tokens: readonly number[],
    seqs: readonly RemoteSequence[],
    needs?: readonly LogitsNeed[],
  ): Promise<RowResult[]> {
    return this.step({ decode: { seqs, tokens: [...tokens], needs: rowNeeds(needs, seqs.length) } });
  }

  /**
   * A prompt piece of one sequence and a decode step of others as one step on every node
   * (`forward-mixed`): the decode rows ride along the piece's forward there instead of waiting
   * for it, and give what `forward` and `forwardBatch` would, bit for bit.
   */
  async forwardMixed(
    prefill: { tokens: readonly number[]; cache: RemoteSequence; need?: LogitsNeed },
    decode: { tokens: readonly number[]; caches: readonly RemoteSequence[]; needs?: readonly LogitsNeed[] },
  ): Promise<{ prefill: RowResult; decode: RowResult[] }> {
    const piece = { seq: prefill.cache, tokens: [...prefill.tokens], need: prefill.need ?? 'logits' };
    const rows = {
      seqs: decode.caches,
      tokens: [...decode.tokens],
      needs: rowNeeds(decode.needs, decode.caches.length),
    };
    if (rows.seqs.length === 0) return { prefill: (await this.step({ prefill: piece }))[0], decode: [] };
    if (piece.tokens.length === 0) return { prefill: undefined, decode: await this.step({ decode: rows }) };
    const [first, ...rest] = await this.step({ prefill: piece, decode: rows });
    this.cluster.mixedSteps++;
    return { prefill: first, decode: rest };
  }

  private async step(step: Step): Promise<RowResult[]> {
    for (const [seq, grow] of growth(step)) {
      if (seq.length + grow > seq.contextLength)
        throw new TandemError(
          'KV_CONTEXT_FULL',
          `sequence ${seq.id} holds ${seq.length} positions; ${grow} more exceed its context of ${seq.contextLength}`,
          { hint: 'shorten the prompt or ask for fewer tokens' },
        );
    }
    for (;;) {
      if (this.broken !== undefined) throw this.broken;
      const generation = this.cluster.generation;
      try {
        // nothing goes to the nodes while a placement is being made: a member joined (place
        // on every member now, between two steps), or one was lost (its placement runs)
        if (this.cluster.replanWanted || !this.cluster.placed || this.cluster.someLost())
          await this.rebuild();
        for (const [seq] of growth(step)) if (seq.unplaced) await this.replayOne(seq);
        const rows = await this.send(step);
        // what replay runs again: a piece as a prompt chunk, a decode token as a batch row
        // (a mixed step gives each the bits of those, so the caches come back the same)
        step.prefill?.seq.ops.push(step.prefill.tokens);
        for (const [t, seq] of (step.decode?.seqs ?? []).entries())
          seq.ops.push(step.decode!.tokens[t] as number);
        return rows;
      } catch (error) {
        await this.heal(error, generation);
      }
    }
  }

  /** One step on every node of the current placement; every request has settled when this throws. */
  private async send(step: Step): Promise<RowResult[]> {
    const session = this.cluster.session;
    const plan = session.placement?.plan;
    if (!plan)
      throw new TandemError('CLUSTER_PROTOCOL', 'a serving step before load', { hint: 'load a model first' });
    const needs = needsOf(step);
    const { type, body } = stepMessage(step, session.onePass, needs);
    // the members' failures in the order they arrived: the first names the link that broke, later
    // ones may name a rank that closed its links on the abort below
    const failures: PromiseRejectedResult[] = [];
    const sent = session.clients.map((c) =>
      c.request(type, body, this.stepTimeoutMs).catch((reason: unknown) => {
        failures.push({ status: 'rejected', reason });
        throw reason;
      }),
    );
    let replies;
    try {
      replies = await Promise.all(sent);
    } catch (error) {
      // a lost member fails its request at once, the survivors theirs once told to abort; a
      // link lost between two members fails one end, and the others are told here (an abort
      // notice cannot cross the broken link)
      if (error instanceof TandemError && error.code === 'COLL_PEER_LOST')
        for (const c of session.clients) c.notify('abort', { reason: error.message });
      await Promise.allSettled(sent);
      const link = brokenLink(failures);
      throw link ? new LinkDownError(link, error) : error;
    }
    const rows = decodeRows(replies[logitsRank(plan)] ?? {}, needs, this.config.vocabSize);
    for (const [seq, grow] of growth(step)) {
      seq.stale = false;
      seq.keep = undefined;
      seq.length += grow;
    }
    return rows;
  }

  /**
   * After a failed step: when a member was lost, or the link between two live members went
   * down, place again and replay (again if another is lost meanwhile); when nothing can be placed, wait for a member to join. Any other error,
   * or no placement within HEAL_DEADLINE_MS, fails the step; only an error that is not about
   * the members also fails every later step.
   */
  private async heal(error: unknown, generation: number): Promise<void> {
    const started = performance.now();
    const cut = (): boolean =>
      generation !== this.cluster.generation || this.cluster.someLost() || !this.cluster.placed;
    if (!cut() && error instanceof LinkDownError) {
      // a member silent past a heartbeat may be the dead end of the link: let the silence rule judge it
      const quiet = (): boolean => this.cluster.session.clients.some((c) => c.silentMs > 1.2 * HEARTBEAT_MS);
      const waited = (): number => performance.now() - started;
      while (!cut() && (waited() < LOSS_GRACE_MS || (quiet() && waited() < silenceLimitMs() + LOSS_GRACE_MS)))
        await sleep(50);
      // both ends alive: place again without that link
      if (!cut()) this.cluster.linkDown(error.ranks, error.message);
    } else if (!cut()) {
      this.broken = error;
      throw error;
    }
    await this.rebuild(HEAL_DEADLINE_MS - (performance.now() - started));
    this.heals.push(performance.now() - started);
  }

  /** Places the model on the members alive and replays every sequence, within `budgetMs`. */
  private async rebuild(budgetMs = HEAL_DEADLINE_MS): Promise<void> {
    const end = performance.now() + budgetMs;
    // after a failed replay the nodes have aborted that placement's collectives: place again
    let again = false;
    for (;;) {
      try {
        if (again || !this.cluster.placed || this.cluster.someLost() || this.cluster.replanWanted)
          await this.cluster.place().catch(async (e: unknown) => {
            if (!(e instanceof TandemError && e.code === 'CLUSTER_NO_PLACEMENT')) throw e;
            await this.cluster.whenPlaced(Math.max(0, end - performance.now()));
          });
        await this.replay();
        return;
      } catch (e) {
        if (performance.now() > end || (e instanceof TandemError && e.code === 'CLUSTER_NO_PLACEMENT'))
          throw e;
        again = true;
      }
    }
  }

  /**
   * Fills the sequences' caches on the new placement with the forwards that filled them: each
   * sequence's prompt chunks, then the decode tokens of all sequences as batch rows, in step
   * order (row t of each sequence in the t-th batch). A sequence whose history holds no decode
   * token (a prompt kept in an idle slot, or one still being prefilled) is left unplaced and
   * filled before its next step (replayOne), so that a heal does not wait for every kept
   * prompt to be prefilled again.
   */
  private async replay(): Promise<void> {
    const live = [...this.sequences].filter((s) => s.ops.length > 0);
    const rows = new Map<RemoteSequence, number[]>();
    for (const s of live) {
      if (!s.ops.some((op) => typeof op === 'number')) {
        s.unplaced = true;
        continue;
      }
      [s.stale, s.keep, s.length, s.unplaced] = [true, undefined, 0, false];
      let i = 0;
      for (; i < s.ops.length && Array.isArray(s.ops[i]); i++)
        await this.send({ prefill: { seq: s, tokens: s.ops[i] as number[], need: 'none' } });
      const rest = s.ops.slice(i);
      if (rest.some((op) => typeof op !== 'number')) await this.replayOps(s, rest);
      else if (rest.length > 0) rows.set(s, rest as number[]);
    }
    for (let t = 0; ; t++) {
      const batch = [...rows].filter(([, r]) => r.length > t);
      if (batch.length === 0) break;
      await this.send({
        decode: {
          seqs: batch.map(([s]) => s),
          tokens: batch.map(([, r]) => r[t] as number),
          needs: batch.map(() => 'none'),
        },
      });
    }
  }

  /** Fills an unplaced sequence's caches from its history, one forward at a time. */
  private async replayOne(s: RemoteSequence): Promise<void> {
    [s.stale, s.keep, s.length] = [true, undefined, 0];
    await this.replayOps(s, s.ops);
    s.unplaced = false;
  }

  /**
   * Runs `ops` for one sequence one at a time: a chunk as a prompt piece, a decode token as a
   * one-row step (a lone token's bits), a cut sent with the sequence's next step as it was
   * the first time.
   */
  private async replayOps(s: RemoteSequence, ops: readonly SequenceOp[]): Promise<void> {
    for (const op of ops.slice()) {
      if (Array.isArray(op)) await this.send({ prefill: { seq: s, tokens: op, need: 'none' } });
      else if (typeof op === 'number')
        await this.send({ decode: { seqs: [s], tokens: [op], needs: ['none'] } });
      else [s.length, s.keep] = [op.keep, s.stale ? undefined : op.keep];
    }
  }
}

/**
 * A serving step as the coordinator drives it: a prompt piece of one sequence (`forward`), a
 * decode token of each of several (`forward-batch`), or both in one request (`forward-mixed`).
 */
interface Step {
  prefill?: { seq: RemoteSequence; tokens: number[]; need: LogitsNeed };
  decode?: { seqs: readonly RemoteSequence[]; tokens: number[]; needs: readonly LogitsNeed[] };
}

/** The needs of a step's rows in answer order (the piece's row first). */
function needsOf(step: Step): LogitsNeed[] {
  return [...(step.prefill ? [step.prefill.need] : []), ...(step.decode?.needs ?? [])];
}

/** A caller's needs of n rows, checked: absent means every row's logits. */
function rowNeeds(needs: readonly LogitsNeed[] | undefined, n: number): readonly LogitsNeed[] {
  if (needs === undefined) return new Array<LogitsNeed>(n).fill('logits');
  if (needs.length !== n)
    throw new TandemError('CLUSTER_PROTOCOL', `${needs.length} logits needs for ${n} rows`, {
      hint: 'this is a bug: report it',
    });
  return needs;
}

/** The positions each sequence of a step takes. */
function growth(step: Step): [RemoteSequence, number][] {
  const out: [RemoteSequence, number][] = [];
  if (step.prefill) out.push([step.prefill.seq, step.prefill.tokens.length]);
  for (const seq of step.decode?.seqs ?? []) out.push([seq, 1]);
  return out;
}

/**
 * The control request of a step (sequence-wire.ts) with its rows' needs (needsOf); `reset` names
 * the sequences whose caches start over, `keep` those cut back first.
 */
function stepMessage(
  step: Step,
  onePass: boolean,
  needs: readonly LogitsNeed[],
): { type: string; body: Message } {
  const { prefill, decode } = step;
  const reset = growth(step)
    .filter(([s]) => s.stale)
    .map(([s]) => s.id);
  const keep = growth(step)
    .filter(([s]) => s.keep !== undefined)
    .map(([s]) => [s.id, s.keep as number]);
  const cuts = keep.length > 0 ? { keep } : {};
  if (prefill && decode)
    return {
      type: 'forward-mixed',
      body: {
        prefill: { seq: prefill.seq.id, tokens: prefill.tokens },
        decode: { seqs: decode.seqs.map((s) => s.id), tokens: decode.tokens },
        reset,
        ...cuts,
        onePass,
        needs,
      },
    };
  if (prefill)
    return {
      type: 'forward',
      body: { seqs: [prefill.seq.id], tokens: prefill.tokens, reset, ...cuts, needs },
    };
  if (decode)
    return {
      type: 'forward-batch',
      body: { seqs: decode.seqs.map((s) => s.id), tokens: decode.tokens, reset, ...cuts, needs },
    };
  throw new TandemError('CLUSTER_PROTOCOL', 'a serving step with no prompt piece and no decode row', {
    hint: 'this is a bug: report it',
  });
}
