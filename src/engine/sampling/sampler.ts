import { randomInt } from 'node:crypto';
import { TandemError } from '../../errors/index.js';
import { Rng } from './rng.js';
import type { TokenConstraint } from './token-constraint.js';

export interface SamplerOptions {
  /** 0 samples greedily (argmax, lowest id on ties). Default 0.8. */
  temperature?: number;
  /** Keep the k most likely tokens; 0 disables. Default 40. */
  topK?: number;
  /** Keep the smallest most-likely set whose probability reaches p; 1 disables. Default 0.95. */
  topP?: number;
  /** Drop tokens less likely than minP x the most likely one; 0 disables. Default 0.05. */
  minP?: number;
  /** Divide positive logits (multiply negative ones) of recent tokens by this; 1 disables. Default 1. */
  repeatPenalty?: number;
  /** How many recent tokens the penalties look at. Default 64. */
  repeatLastN?: number;
  /**
   * Subtracted from the logit of every token seen in the window (OpenAI's presence_penalty);
   * in [-2, 2], 0 disables. Default 0.
   */
  presencePenalty?: number;
  /**
   * Subtracted from a token's logit once per time it occurs in the window (OpenAI's
   * frequency_penalty); in [-2, 2], 0 disables. Default 0.
   */
  frequencyPenalty?: number;
  /** Fixes the random sequence; default a random seed (see `seed`). */
  seed?: number;
  /**
   * Added to the logits of these token ids before anything else (OpenAI's logit_bias, llama.cpp's
   * --logit-bias): each in [-100, 100]; -100 all but bans a token, 100 all but forces it.
   */
  logitBias?: ReadonlyMap<number, number>;
  /** Only the tokens this allows are drawn (after the bias and penalties); `sample` tells it each token drawn. */
  constraint?: TokenConstraint;
}

/** The candidates left after filtering, most likely first, with their final probabilities. */
export interface Distribution {
  ids: number[];
  probs: number[];
}

function paramError(name: string, value: unknown, want: string): TandemError {
  return new TandemError(
    'SAMPLER_PARAMS',
    `sampler ${name} = ${String(value)} is invalid: it must be ${want}`,
    {
      hint: `pass ${name} as ${want}`,
      details: { [name]: value },
    },
  );
}

function check(name: string, v: number, ok: boolean, want: string): number {
  if (!Number.isFinite(v) || !ok) throw paramError(name, v, want);
  return v;
}

/**
 * Picks the next token from logits. Order as llama.cpp's default chain: penalties (repetition,
 * then frequency and presence on the same window, as llama.cpp's penalties sampler), top-k, top-p, min-p, temperature, then a draw from the softmax (or argmax at temperature 0).
 * `sample` records the token it returns in the penalty window; `accept` records others
 * (e.g. the prompt).
 */
export class Sampler {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly repeatPenalty: number;
  readonly repeatLastN: number;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  readonly seed: number;
  readonly logitBias: ReadonlyMap<number, number>;
  readonly constraint: TokenConstraint | undefined;
  private readonly rng: Rng;
  private history: number[] = [];

  constructor(options: SamplerOptions = {}) {
    this.temperature = check(
      'temperature',
      options.temperature ?? 0.8,
      (options.temperature ?? 0.8) >= 0,
      'a number >= 0',
    );
    const k = options.topK ?? 40;
    this.topK = check('topK', k, Number.isInteger(k) && k >= 0, 'an integer >= 0');
    const p = options.topP ?? 0.95;
    this.topP = check('topP', p, p > 0 && p <= 1, 'a number in (0, 1]');
    const m = options.minP ?? 0.05;
    this.minP = check('minP', m, m >= 0 && m <= 1, 'a number in [0, 1]');
    const r = options.repeatPenalty ?? 1;
    this.repeatPenalty = check('repeatPenalty', r, r > 0, 'a number > 0');
    const n = options.repeatLastN ?? 64;
    this.repeatLastN = check('repeatLastN', n, Number.isInteger(n) && n >= 0, 'an integer >= 0');
    const pp = options.presencePenalty ?? 0;
    this.presencePenalty = check('presencePenalty', pp, pp >= -2 && pp <= 2, 'a number in [-2, 2]');
    const fp = options.frequencyPenalty ?? 0;
    this.frequencyPenalty = check('frequencyPenalty', fp, fp >= -2 && fp <= 2, 'a number in [-2, 2]');
    const seed = options.seed ?? randomInt(2 ** 32);
    this.seed = check('seed', seed, Number.isSafeInteger(seed) && seed >= 0, 'an integer >= 0');
    this.rng = new Rng(seed % 2 ** 32);
    const bias = options.logitBias ?? new Map<number, number>();
    for (const [id, b] of bias) {
      check('logitBias token id', id, Number.isInteger(id) && id >= 0, 'an integer token id >= 0');
      check(`logitBias[${id}]`, b, b >= -100 && b <= 100, 'a number in [-100, 100]');
    }
    this.logitBias = new Map(bias);
    this.constraint = options.constraint;
  }

  /** Whether `sample` is greedyPick of the raw logits: temperature 0, no penalties, no bias, no constraint. */
  get greedy(): boolean {
    return (
      this.temperature === 0 &&
      this.constraint === undefined &&
      this.repeatPenalty === 1 &&
      this.presencePenalty === 0 &&
      this.frequencyPenalty === 0 &&
      this.logitBias.size === 0
    );
  }

  /** Records tokens (prompt or generated elsewhere) for the repetition penalty. */
  accept(...ids: number[]): void {
    for (const id of ids) this.history.push(id);
    const keep = Math.max(this.repeatLastN, 0);
    if (this.history.length > keep * 2 + 64) this.history = this.history.slice(-keep);
  }

  /** Forgets the penalty window (the random sequence continues). */
  reset(): void {
    this.history = [];
  }

  sample(logits: Float32Array): number {
    let z = this.penalized(logits);
    let id: number;
    const c = this.constraint;
    if (c === undefined) {
      id = this.draw(z);
    } else {
      // Drawing first and masking only when the draw is refused samples the masked distribution
      // exactly where nothing truncates it (argmax; a plain softmax draw, whose refused draws are
      // redrawn from the rest in proportion); top-k, top-p and min-p see the mask first.
      const truncates = this.temperature > 0 && (this.topK > 0 || this.topP < 1 || this.minP > 0);
      id = truncates ? -1 : this.draw(z);
      if (id < 0 || !c.allows(id)) {
        if (z === logits) z = Float32Array.from(logits);
        c.mask(z);
        id = this.draw(z);
      }
      c.accept(id);
    }
    this.accept(id);
    return id;
  }

  /** The filtered distribution `sample` draws from (one certain token at temperature 0), without the constraint. */
  distribution(logits: Float32Array): Distribution {
    return this.filtered(this.penalized(logits));
  }

  /** One token from the filtered distribution of penalized logits `z`. */
  private draw(z: Float32Array): number {
    const dist = this.filtered(z);
    let id = dist.ids[0] as number;
    if (dist.ids.length > 1) {
      let u = this.rng.next();
      for (let i = 0; i < dist.ids.length; i++) {
        u -= dist.probs[i] as number;
        if (u < 0 || i === dist.ids.length - 1) {
          id = dist.ids[i] as number;
          break;
        }
      }
    }
    return id;
  }

  private filtered(z: Float32Array): Distribution {
    if (this.temperature === 0) return { ids: [argmax(z)], probs: [1] };
    let ids: number[];
    if (this.topK > 0) {
      ids = topKIds(z, this.topK);
      if (this.topP < 1) ids = ids.slice(0, topPCount(ids, z, this.topP, massOf(ids, z)));
    } else if (this.topP < 1) {
      ids = topPPrefix(z, this.topP);
    } else if (this.minP > 0) {
      ids = idsAbove(z, (z[argmax(z)] as number) + Math.log(this.minP));
    } else {
      // No truncation: no need to sort, sample over the whole vocabulary in id order.
      ids = idsAbove(z, -Infinity, false);
    }
    if (this.minP > 0) {
      // p_i >= minP * p_max  <=>  z_i >= z_max + ln(minP); ids are sorted here, so cut the tail.
      const floor = (z[ids[0] as number] as number) + Math.log(this.minP);
      let keep = 1;
      while (keep < ids.length && (z[ids[keep] as number] as number) >= floor) keep++;
      ids = ids.slice(0, keep);
    }
    return { ids, probs: softmax(ids, z, this.temperature) };
  }

  /** Logits with the bias, then the penalties applied, validated (a copy when changed). */
  private penalized(logits: Float32Array): Float32Array {
    checkLogits(logits);
    const none = this.repeatPenalty === 1 && this.presencePenalty === 0 && this.frequencyPenalty === 0;
    const biased = this.logitBias.size > 0 ? Float32Array.from(logits) : logits;
    for (const [id, b] of this.logitBias) if (id < biased.length) biased[id] = (biased[id] as number) + b;
    if (none || this.repeatLastN === 0 || this.history.length === 0) return biased;
    const out = biased === logits ? Float32Array.from(logits) : biased;
    const counts = new Map<number, number>();
    for (const id of this.history.slice(-this.repeatLastN)) counts.set(id, (counts.get(id) ?? 0) + 1);
    for (const [id, count] of counts) {
      if (id < 0 || id >= out.length) continue;
      const v = out[id] as number;
      const repeated = v <= 0 ? v * this.repeatPenalty : v / this.repeatPenalty;
      out[id] = repeated - count * this.frequencyPenalty - this.presencePenalty;
    }
    return out;
  }
}

/** Throws SAMPLER_LOGITS unless the row can be sampled: not empty, no NaN or +Infinity, some logit finite. */
function checkLogits(logits: Float32Array): void {
  if (logits.length === 0)
    throw new TandemError('SAMPLER_LOGITS', 'the sampler got an empty logits array', {
      hint: 'pass the model output for the last position, one logit per vocabulary entry',
    });
  let finite = false;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i] as number;
    if (Number.isNaN(v) || v === Infinity)
      throw new TandemError('SAMPLER_LOGITS', `logit ${i} is ${v}`, {
        hint: 'the forward pass produced invalid values; check the model weights and kernels',
        details: { index: i },
      });
    if (v !== -Infinity) finite = true;
  }
  if (!finite)
    throw new TandemError('SAMPLER_LOGITS', `all ${logits.length} logits are -Infinity`, {
      hint: 'nothing can be sampled; check masking applied before sampling',
    });
}

/**
 * The token a greedy sampler with no penalties picks: the lowest id holding the largest
 * logit, after the checks every pick makes (a typed error for a broken row).
 */
export function greedyPick(logits: Float32Array): number {
  checkLogits(logits);
  return argmax(logits);
}

function argmax(z: Float32Array): number {
  let best = 0;
  for (let i = 1; i < z.length; i++) if ((z[i] as number) > (z[best] as number)) best = i;
  return best;
}

/** Descending by logit, ties by lower id. */
function byLogit(z: Float32Array): (a: number, b: number) => number {
  return (a, b) => (z[b] as number) - (z[a] as number) || a - b;
}

/** Ids with a logit >= floor (never -Infinity), sorted by `byLogit` unless `sort` is false. */
function idsAbove(z: Float32Array, floor: number, sort = true): number[] {
  const ids: number[] = [];
  for (let i = 0; i < z.length; i++) {
    const v = z[i] as number;
    if (v >= floor && v !== -Infinity) ids.push(i);
  }
  return sort ? ids.sort(byLogit(z)) : ids;
}

/** Sum of exp(z - max) over ids; ids[0] holds the max. */
function massOf(ids: readonly number[], z: Float32Array): number {
  const max = z[ids[0] as number] as number;
  let sum = 0;
  for (const id of ids) sum += Math.exp((z[id] as number) - max);
  return sum;
}

/** How many of the sorted ids it takes for their probability (out of `total`) to reach p. */
function topPCount(ids: readonly number[], z: Float32Array, p: number, total: number): number {
  const max = z[ids[0] as number] as number;
  let cum = 0;
  for (let i = 0; i < ids.length; i++) {
    cum += Math.exp((z[ids[i] as number] as number) - max) / total;
    if (cum >= p) return i + 1;
  }
  return ids.length;
}

/**
 * The top-p prefix over the whole vocabulary without sorting all of it: the tokens within
 * `gap` of the best are a prefix of the sorted order, so once their mass reaches p only they
 * need sorting; the gap doubles until it does.
 */
function topPPrefix(z: Float32Array, p: number): number[] {
  const best = argmax(z);
  const max = z[best] as number;
  let total = 0;
  for (let i = 0; i < z.length; i++) total += Math.exp((z[i] as number) - max);
  for (let gap = 8; ; gap *= 2) {
    const floor = gap > 128 ? -Infinity : max - gap;
    const ids = idsAbove(z, floor, false);
    let mass = 0;
    for (const id of ids) mass += Math.exp((z[id] as number) - max);
    if (mass / total >= p || floor === -Infinity) {
      ids.sort(byLogit(z));
      return ids.slice(0, topPCount(ids, z, p, total));
    }
  }
}

/** The k best ids, sorted, in O(n log k) with a min-heap of the best so far. */
function topKIds(z: Float32Array, k: number): number[] {
  const worse = (a: number, b: number): boolean =>
    (z[a] as number) < (z[b] as number) || (z[a] === z[b] && a > b);
  const heap: number[] = [];
  const siftDown = (i: number): void => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && worse(heap[l] as number, heap[m] as number)) m = l;
      if (r < heap.length && worse(heap[r] as number, heap[m] as number)) m = r;
      if (m === i) return;
      const t = heap[i] as number;
      heap[i] = heap[m] as number;
      heap[m] = t;
      i = m;
    }
  };
  for (let id = 0; id < z.length; id++) {
    if (z[id] === -Infinity) continue;
    if (heap.length < k) {
      heap.push(id);
      for (let i = heap.length - 1; i > 0;) {
        const p = (i - 1) >> 1;
        if (!worse(heap[i] as number, heap[p] as number)) break;
        const t = heap[i] as number;
        heap[i] = heap[p] as number;
        heap[p] = t;
        i = p;
      }
    } else if (worse(heap[0] as number, id)) {
      heap[0] = id;
      siftDown(0);
    }
  }
  return heap.sort(byLogit(z));
}

function softmax(ids: readonly number[], z: Float32Array, temperature: number): number[] {
  let max = -Infinity;
  for (const id of ids) max = Math.max(max, z[id] as number);
  const e = ids.map((id) => Math.exp(((z[id] as number) - max) / temperature));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}
