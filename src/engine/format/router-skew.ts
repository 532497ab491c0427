import { TandemError } from '../../errors/index.js';
import { Rng } from './random-weights.js';

/** How a generated router spreads tokens over experts: uniform (random weights) or Zipf with exponent s. */
export type RouterSkew = { kind: 'zipf'; s: number };

export function parseRouterSkew(text: string): RouterSkew {
  const m = /^zipf:(\d+(?:\.\d+)?)$/.exec(text.trim());
  const s = Number(m?.[1]);
  if (!m || !(s > 0 && s <= 4))
    throw new TandemError('CLI_USAGE', `make-model: cannot read --router-skew '${text}'`, {
      hint: 'write --router-skew zipf:S with 0 < S <= 4, e.g. zipf:1.2',
    });
  return { kind: 'zipf', s };
}

/**
 * The share of top-k choices each expert should get: expert e (by rank e + 1) in proportion
 * to 1 / (e + 1)^s, scaled so the shares sum to k; an expert cannot be chosen twice for one
 * token, so a share above 1 is capped and its excess spread over the others in proportion.
 */
export function zipfChoiceShares(experts: number, used: number, s: number): number[] {
  const raw = Array.from({ length: experts }, (_, e) => 1 / (e + 1) ** s);
  const sum = raw.reduce((a, b) => a + b, 0);
  const shares = raw.map((r) => (r / sum) * used);
  for (let pass = 0; pass < experts; pass++) {
    const over = shares.reduce((a, v) => a + Math.max(0, v - 1), 0);
    if (over < 1e-12) break;
    const free = shares.reduce((a, v) => a + (v < 1 ? v : 0), 0);
    for (let e = 0; e < experts; e++) shares[e] = shares[e]! >= 1 ? 1 : shares[e]! * (1 + over / free);
  }
  return shares;
}

/**
 * How often each logit lands in the top `used` when logit e is N(0, 1) + offsets[e]
 * (independent), over `samples` draws.
 */
export function topKFrequencies(
  offsets: readonly number[],
  used: number,
  samples: number,
  rng: Rng,
): number[] {
  const n = offsets.length;
  const counts = new Array<number>(n).fill(0);
  const z = new Float32Array(n);
  const order = Array.from({ length: n }, (_, i) => i);
  for (let t = 0; t < samples; t++) {
    rng.fillNormal(z, 0, 1);
    for (let i = 0; i < n; i++) z[i]! += offsets[i]!;
    order.sort((a, b) => z[b]! - z[a]!);
    for (let j = 0; j < used; j++) counts[order[j]!]!++;
  }
  return counts.map((c) => c / samples);
}

/**
 * Per-expert logit offsets, in units of the random part's spread, that make top-k routing
 * follow Zipf(s): found by fixed-point iteration on sampled logits (seeded: a seed gives one
 * file). Expert 0 is the hottest.
 */
export function zipfLogitOffsets(experts: number, used: number, s: number, seed: number): number[] {
  const target = zipfChoiceShares(experts, used, s);
  const rng = new Rng((seed ^ 0x5eed5eed) >>> 0);
  let offsets = target.map(() => 0);
  for (let iter = 0; iter < 60; iter++) {
    const f = topKFrequencies(offsets, used, 4000, rng);
    offsets = offsets.map((v, e) => v + 1.5 * (target[e]! - f[e]!));
    const mean = offsets.reduce((a, b) => a + b, 0) / experts;
    offsets = offsets.map((v) => v - mean);
  }
  return offsets;
}
