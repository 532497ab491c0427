import { setImmediate as nextTurn } from 'node:timers/promises';
import {
  MIXED_PREFILL_CHUNK,
  PREFILL_CHUNK,
  prefillPiece,
  type LogitsNeed,
  type RowResult,
  type SessionOptions,
} from '../engine/index.js';
import { TandemError } from '../errors/index.js';
import { GEMM_TOKENS } from '../kernels/index.js';
import { cancelled, retryLater } from './errors.js';
import type { Metrics } from './metrics.js';

/**
 * A slot's sequence state as the scheduler sees it (a KV cache in this process, or the id of
 * caches on a cluster's nodes): opaque but for starting over.
 */
export interface SlotCache {
  reset(): void;
  /**
   * Optional: forgets positions from `length` on. With it, a finished slot keeps its prompt's
   * K/V, and a next prompt that starts the same is prefilled from where they part (see
   * Scheduler).
   */
  truncate?(length: number): void;
}

/**
 * What the scheduler needs of a model: forwards against a cache, and caches to give slots.
 * `need`/`needs` say what the caller uses of each row's logits (default 'logits').
 */
export interface SlotModel {
  newSession(options: SessionOptions): SlotCache;
  /** Runs tokens at the cache's next positions; the last one's row. */
  forward(tokens: ArrayLike<number>, cache: SlotCache, need?: LogitsNeed): Promise<RowResult>;
  /** One decode step of several sequences (token t at the next position of caches[t]); each row. */
  forwardBatch(
    tokens: readonly number[],
    caches: readonly SlotCache[],
    needs?: readonly LogitsNeed[],
  ): Promise<RowResult[]>;
  /**
   * Optional: a prefill piece of one sequence and a decode step of others in one forward
   * (the decode rows ride along the prefill's pass over the weights), giving what `forward`
   * and `forwardBatch` would, bit for bit. Without it the scheduler runs the two apart.
   */
  forwardMixed?(
    prefill: { tokens: readonly number[]; cache: SlotCache; need?: LogitsNeed },
    decode: { tokens: readonly number[]; caches: readonly SlotCache[]; needs?: readonly LogitsNeed[] },
  ): Promise<{ prefill: RowResult; decode: RowResult[] }>;
  /** Optional: the forwardMixed piece that suits the model's kernels (default MIXED_PREFILL_CHUNK). */
  readonly mixedChunk?: number;
}

/** One sequence to run: its prompt, how it picks tokens, and where its tokens go. */
export interface SequenceRequest {
  prompt: readonly number[];
  /** Tokens to generate at most (the caller has checked that prompt + maxTokens fit the context). */
  maxTokens: number;
  pick: (logits: Float32Array) => number;
  /**
   * `pick` is greedyPick (temperature 0, no penalties) and `onToken` never reads the logits:
   * the model may answer this sequence's rows with their token ids alone (RowResult).
   */
  argmaxOnly?: boolean;
  /** Tokens that end the sequence once generated (end of generation). */
  stopTokens: ReadonlySet<number>;
  /**
   * Called with each generated token and the logits it was picked from (valid during the
   * call only; undefined for an argmaxOnly sequence whose row came as a token id); returns
   * false to end the sequence there (a stop string was found).
   */
  onToken: (token: number, logits: Float32Array | undefined) => boolean;
  /** Aborting cancels the sequence: in the queue at once, in a slot before its next forward. */
  signal: AbortSignal;
  /** Called when the sequence leaves the queue for a slot (the end of its queue time). */
  onAdmit?: () => void;
}

export interface SequenceEnd {
  reason: 'stop' | 'length';
  generated: number;
  /** Prompt tokens whose K/V the slot already held (not prefilled again). */
  cachedPromptTokens: number;
}

export interface SchedulerOptions {
  /** Sequences that run at once, each in a slot with its own KV cache. */
  slots: number;
  /** Requests that may wait for a slot; one more is refused with 429. */
  maxQueue: number;
  /** Positions each slot's KV cache holds. */
  contextLength: number;
  kvType?: 'f32' | 'f16';
  /**
   * Prompt tokens prefilled per round (default PREFILL_CHUNK): a long prompt is spread over
   * rounds so running streams keep flowing. Pieces are cut by prefillPiece, so the chunk
   * does not change a sequence's tokens.
   */
  prefillChunk?: number;
  /**
   * Prompt tokens per round while other streams decode beside it through forwardMixed (default
   * the model's mixedChunk, else MIXED_PREFILL_CHUNK).
   */
  mixedChunk?: number;
  metrics: Metrics;
  /**
   * Tests only: runs before every forward of a sequence, with how many tokens it has
   * generated. Throwing fails that sequence as a forward that failed would; awaiting slows the
   * round (so that a test can act while a sequence runs).
   */
  stepHook?: (generated: number) => void | Promise<void>;
}

interface Sequence {
  request: SequenceRequest;
  resolve: (end: SequenceEnd) => void;
  reject: (error: unknown) => void;
  /** Prompt tokens prefilled so far; the sequence decodes once all are. */
  prefilled: number;
  generated: number;
  /** The last generated token: the next decode step's input. */
  next: number;
  /** Prompt tokens taken from the slot's cache instead of prefilled. */
  cached: number;
}

interface Slot {
  cache: SlotCache | undefined;
  seq: Sequence | undefined;
  /** The prompt tokens whose K/V the cache holds from a prefill in the GEMM size class. */
  held: readonly number[];
  /** When a sequence last took the slot (the scheduler's admission count). */
  usedAt: number;
}

/** What waits in a slot or the queue, and when the server may answer again with a free place. */
const RETRY_AFTER_S = 1;

/**
 * Runs sequences in slots. Each round runs one decode step for every decoding sequence as one
 * batched forward (the model's forwardBatch: its rows get the bits a lone forward would give,
 * so a sequence's tokens do not depend on what runs beside it), then one prefill chunk of the
 * oldest sequence still prefilling (cut by prefillPiece, so chunks do not change its bits).
 * Where the model has forwardMixed, a round with a prefill runs both in that one forward: the
 * decode rows ride along the prefill's pass over the weights, and the chunk is smaller while
 * streams decode beside it, so they keep flowing. New requests take a free slot between rounds
 * (first come, first served). A finished slot keeps its KV cache for the next sequence.
 *
 * Prompt reuse: where the cache can truncate, a slot keeps the K/V of its last prompt, and a
 * new sequence takes the free slot whose prompt shares the longest start with its own and is
 * prefilled from there; a sequence with nothing to reuse takes a slot that holds no prompt,
 * else the one used longest ago, so the prompts kept for others are given up last. Only
 * positions a prefill computed in the GEMM size class (a prompt of GEMM_TOKENS or more, cut by
 * prefillPiece) are kept, and at least GEMM_TOKENS of the new prompt are prefilled again, so
 * every prompt position has the bits a fresh prefill would give (a position's K/V depends on
 * the tokens up to it and its size class only, not on the cut) and the sequence's tokens are
 * those of the prompt run alone. Generated positions are never reused: their decode steps ran
 * in the one-token size class.
 */
export class Scheduler {
  private readonly slots: Slot[];
  private readonly queue: Sequence[] = [];
  private running = false;
  private closing = false;
  /** Sequences admitted so far (each slot's usedAt is one of these). */
  private admitted = 0;
  private idle: (() => void) | undefined;

  constructor(
    private readonly model: SlotModel,
    private readonly options: SchedulerOptions,
  ) {
    this.slots = Array.from({ length: options.slots }, () => ({
      cache: undefined,
      seq: undefined,
      held: [],
      usedAt: 0,
    }));
  }

  get queueDepth(): number {
    return this.queue.length;
  }

  get activeSlots(): number {
    return this.slots.filter((s) => s.seq).length;
  }

  get slotCount(): number {
    return this.slots.length;
  }

  /**
   * Queues a sequence and returns when it ends; throws at once (a 429) when the queue is full
   * or (a 503) when the scheduler is closing, so that the caller can answer before streaming.
   */
  submit(request: SequenceRequest): Promise<SequenceEnd> {
    if (this.closing)
      throw retryLater(
        'API_SHUTTING_DOWN',
        'the server is shutting down',
        RETRY_AFTER_S,
        'send the request to another server or after the restart',
      );
    // queued requests take the free slots first (at the next round), then the queue's places
    const freeSlots = this.slots.length - this.activeSlots;
    if (this.queue.length >= freeSlots + this.options.maxQueue) {
      throw retryLater(
        'API_QUEUE_FULL',
        `all ${this.slots.length} slots are busy and ${this.queue.length} requests wait (--max-queue ${this.options.maxQueue})`,
        RETRY_AFTER_S,
        'retry after the Retry-After seconds, or start the server with more --slots or a longer --max-queue',
      );
    }
    return new Promise<SequenceEnd>((resolve, reject) => {
      const seq: Sequence = { request, resolve, reject, prefilled: 0, generated: 0, next: -1, cached: 0 };
      this.queue.push(seq);
      request.signal.addEventListener('abort', () => this.dropQueued(seq), { once: true });
      if (!this.running) void this.loop();
    });
  }

  /**
   * Stops taking requests, lets what runs finish for up to `graceMs`, then cancels the rest
   * (their callers get API_CANCELLED). Resolves once nothing runs.
   */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    if (!this.running) return;
    const stopped = new Promise<void>((resolve) => (this.idle = resolve));
    const timer = setTimeout(() => {
      for (const seq of this.queue.splice(0)) this.fail(seq, cancelled('the server is shutting down'));
      for (const slot of this.slots)
        if (slot.seq) this.endSlot(slot, undefined, cancelled('the server is shutting down'));
    }, graceMs);
    await stopped;
    clearTimeout(timer);
  }

  private dropQueued(seq: Sequence): void {
    const at = this.queue.indexOf(seq);
    if (at < 0) return;
    this.queue.splice(at, 1);
    this.fail(seq, cancelled('the client went away'));
  }

  private async loop(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0 || this.activeSlots > 0) {
        this.admit();
        await this.round();
        // let HTTP I/O, aborts and new requests in between rounds
        await nextTurn();
      }
    } finally {
      this.running = false;
      this.idle?.();
    }
  }

  private admit(): void {
    for (;;) {
      const free = this.slots.filter((s) => !s.seq);
      const seq = free.length > 0 ? this.queue.shift() : undefined;
      if (!seq) return;
      const prompt = seq.request.prompt;
      // the free slot that holds the longest start of this prompt; with none, one that holds no
      // prompt, else the one used longest ago: the prompts kept for others go last
      let slot = free[0] as Slot;
      let cached = 0;
      for (const s of free) {
        const n = s.cache?.truncate ? reusable(s.held, prompt) : 0;
        if (n > cached || (n === cached && cached === 0 && evictsBefore(s, slot))) [slot, cached] = [s, n];
      }
      slot.usedAt = ++this.admitted;
      try {
        slot.cache ??= this.model.newSession({
          contextLength: this.options.contextLength,
          ...(this.options.kvType ? { kvType: this.options.kvType } : {}),
        });
      } catch (error) {
        // no memory for this slot's cache: this request fails, the loop goes on
        this.fail(seq, error);
        continue;
      }
      if (cached > 0) slot.cache.truncate!(cached);
      else slot.cache.reset();
      slot.held = [];
      seq.prefilled = seq.cached = cached;
      this.options.metrics.promptTokensCached += cached;
      slot.seq = seq;
      seq.request.onAdmit?.();
    }
  }

  private async round(): Promise<void> {
    const oldest = this.slots.find((s) => s.seq && s.seq.prefilled < s.seq.request.prompt.length);
    if (oldest?.seq && this.model.forwardMixed) return this.mixedRound(oldest, oldest.seq);
    await this.decodeRound();
    if (oldest?.seq) await this.prefillStep(oldest, oldest.seq);
  }

  /** The sequences whose prompt is in and that take this round's decode step. */
  private async decodeRows(): Promise<[Slot, Sequence][]> {
    const rows: [Slot, Sequence][] = [];
    for (const slot of this.slots) {
      const seq = slot.seq;
      if (!seq || seq.prefilled < seq.request.prompt.length) continue;
      if (await this.mayStep(slot, seq)) rows.push([slot, seq]);
    }
    return rows;
  }

  /** One batched decode step of every sequence whose prompt is in. */
  private async decodeRound(): Promise<void> {
    await this.decodeStep(await this.decodeRows());
  }

  private async decodeStep(rows: readonly [Slot, Sequence][]): Promise<void> {
    if (rows.length === 0) return;
    let logits: RowResult[];
    try {
      logits = await this.model.forwardBatch(
        rows.map(([, seq]) => seq.next),
        rows.map(([slot]) => slot.cache as SlotCache),
        rows.map(([, seq]) => need(seq)),
      );
    } catch (error) {
      for (const [slot] of rows) this.endSlot(slot, undefined, error);
      return;
    }
    this.emitRows(rows, logits);
  }

  private emitRows(rows: readonly [Slot, Sequence][], results: readonly RowResult[]): void {
    for (const [i, [slot, seq]] of rows.entries()) if (slot.seq === seq) this.emit(slot, seq, results[i]);
  }

  /**
   * The decode step of every decoding sequence and the next prompt piece of the oldest one
   * still prefilling, in one forwardMixed (a smaller piece while streams decode beside it).
   */
  private async mixedRound(slot: Slot, seq: Sequence): Promise<void> {
    const rows = await this.decodeRows();
    if (!(await this.mayStep(slot, seq))) return this.decodeStep(rows);
    const { prompt } = seq.request;
    const chunk =
      rows.length > 0
        ? (this.options.mixedChunk ?? this.model.mixedChunk ?? MIXED_PREFILL_CHUNK)
        : (this.options.prefillChunk ?? PREFILL_CHUNK);
    const piece = prompt.slice(
      seq.prefilled,
      seq.prefilled + prefillPiece(prompt.length - seq.prefilled, chunk),
    );
    let out: { prefill: RowResult; decode: RowResult[] };
    try {
      out = await this.model.forwardMixed!(
        { tokens: piece, cache: slot.cache as SlotCache, need: pieceNeed(seq, piece.length) },
        {
          tokens: rows.map(([, s]) => s.next),
          caches: rows.map(([s]) => s.cache as SlotCache),
          needs: rows.map(([, s]) => need(s)),
        },
      );
    } catch (error) {
      for (const [s] of rows) this.endSlot(s, undefined, error);
      return this.endSlot(slot, undefined, error);
    }
    this.emitRows(rows, out.decode);
    if (slot.seq !== seq) return; // cancelled while the forward ran (close)
    seq.prefilled += piece.length;
    this.options.metrics.promptTokens += piece.length;
    if (seq.prefilled === prompt.length) this.emit(slot, seq, out.prefill);
  }

  /** The next chunk of a sequence's prompt; after the last one, its first token. */
  private async prefillStep(slot: Slot, seq: Sequence): Promise<void> {
    if (!(await this.mayStep(slot, seq))) return;
    const { prompt } = seq.request;
    const n = prefillPiece(prompt.length - seq.prefilled, this.options.prefillChunk ?? PREFILL_CHUNK);
    const chunk = prompt.slice(seq.prefilled, seq.prefilled + n);
    let logits: RowResult;
    try {
      logits = await this.model.forward(chunk, slot.cache as SlotCache, pieceNeed(seq, chunk.length));
    } catch (error) {
      return this.endSlot(slot, undefined, error);
    }
    if (slot.seq !== seq) return; // cancelled while the forward ran (close)
    seq.prefilled += chunk.length;
    this.options.metrics.promptTokens += chunk.length;
    if (seq.prefilled === prompt.length) this.emit(slot, seq, logits);
  }

  /** Whether the sequence takes its next forward: not when its client went away or the step hook threw. */
  private async mayStep(slot: Slot, seq: Sequence): Promise<boolean> {
    if (seq.request.signal.aborted) {
      this.endSlot(slot, undefined, cancelled('the client went away'));
      return false;
    }
    try {
      await this.options.stepHook?.(seq.generated);
    } catch (error) {
      this.endSlot(slot, undefined, error);
      return false;
    }
    return slot.seq === seq;
  }

  /** Picks the sequence's next token from its row, hands it on, and ends the sequence if it is done. */
  private emit(slot: Slot, seq: Sequence, row: RowResult): void {
    const { request } = seq;
    let token: number;
    let more: boolean;
    try {
      if (row === undefined)
        throw new TandemError('INTERNAL', 'the model answered no logits for a row whose token was due', {
          hint: 'this is a bug: report it',
        });
      const logits = typeof row === 'number' ? undefined : row;
      token = logits ? request.pick(logits) : (row as number);
      seq.generated++;
      this.options.metrics.generatedTokens++;
      more = request.onToken(token, logits);
    } catch (error) {
      return this.endSlot(slot, undefined, error);
    }
    if (request.stopTokens.has(token) || !more) return this.endSlot(slot, 'stop');
    if (seq.generated >= request.maxTokens) return this.endSlot(slot, 'length');
    seq.next = token;
  }

  private endSlot(slot: Slot, reason: SequenceEnd['reason'] | undefined, error?: unknown): void {
    const seq = slot.seq;
    if (!seq) return;
    slot.seq = undefined;
    // a sequence that ended well leaves its prompt's K/V where the cache can truncate (see
    // the class comment); otherwise nothing of it is kept (a cluster's model would replay it
    // after a loss, and a failed forward may have left its positions half written)
    const prompt = seq.request.prompt;
    if (reason && slot.cache?.truncate && prompt.length >= GEMM_TOKENS) {
      slot.cache.truncate(seq.prefilled);
      slot.held = prompt.slice(0, seq.prefilled);
    } else {
      slot.cache?.reset();
      slot.held = [];
    }
    if (reason) seq.resolve({ reason, generated: seq.generated, cachedPromptTokens: seq.cached });
    else this.fail(seq, error);
  }

  private fail(seq: Sequence, error: unknown): void {
    if ((error as { code?: unknown } | null)?.code === 'API_CANCELLED') this.options.metrics.cancelled++;
    seq.reject(error);
  }
}

/** What a sequence's decode rows need of their logits. */
function need(seq: Sequence): LogitsNeed {
  return seq.request.argmaxOnly ? 'argmax' : 'logits';
}

/** What the row of a prompt piece of `n` tokens needs: nothing before the last piece, whose row gives the first token. */
function pieceNeed(seq: Sequence, n: number): LogitsNeed {
  return seq.prefilled + n === seq.request.prompt.length ? need(seq) : 'none';
}

/** Whether a free slot with nothing to reuse is taken before `other`: one holding no prompt, else the one used longer ago. */
function evictsBefore(slot: Slot, other: Slot): boolean {
  const empty = slot.held.length === 0;
  if (empty !== (other.held.length === 0)) return empty;
  return slot.usedAt < other.usedAt;
}

/**
 * Positions of `held` a new prompt can keep: their common start, less what leaves fewer than
 * GEMM_TOKENS of the prompt to prefill (a shorter last piece would run in another size class);
 * 0 for a prompt of GEMM_TOKENS tokens or fewer.
 */
export function reusable(held: readonly number[], prompt: readonly number[]): number {
  const most = Math.min(held.length, prompt.length - GEMM_TOKENS);
  let n = 0;
  while (n < most && held[n] === prompt[n]) n++;
  return n;
}
