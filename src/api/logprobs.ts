import type { Tokenizer } from '../engine/index.js';

/** One alternative at a position: OpenAI's `top_logprobs` item. */
export interface TokenAlternative {
  token: string;
  logprob: number;
  bytes: number[];
}

/** The chosen token at one position with its alternatives: OpenAI's `logprobs.content` item. */
export interface TokenLogprob extends TokenAlternative {
  top_logprobs: TokenAlternative[];
}

/**
 * Log-probabilities of the model's distribution (log-softmax of the raw logits, before
 * penalties, temperature and truncation: what the model thinks, whatever the sampler then
 * did), for the chosen token and the `top` most likely ones, most likely first.
 */
export function tokenLogprob(
  tokenizer: Tokenizer,
  logits: Float32Array,
  chosen: number,
  top: number,
): TokenLogprob {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i] as number);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp((logits[i] as number) - max);
  const lse = max + Math.log(sum);
  const entry = (id: number): TokenAlternative => {
    const bytes = tokenizer.tokenBytes(id, true);
    return {
      token: Buffer.from(bytes).toString('utf8'),
      logprob: (logits[id] as number) - lse,
      bytes: Array.from(bytes),
    };
  };
  return { ...entry(chosen), top_logprobs: topIds(logits, top).map(entry) };
}

/** The k largest logits' ids, largest first (ties to the lower id), in one pass. */
export function topIds(logits: Float32Array, k: number): number[] {
  const best: number[] = [];
  const better = (a: number, b: number): boolean =>
    (logits[a] as number) > (logits[b] as number) || (logits[a] === logits[b] && a < b);
  for (let id = 0; id < logits.length && k > 0; id++) {
    if (best.length === k && !better(id, best[k - 1] as number)) continue;
    let at = best.length === k ? k - 1 : best.length;
    while (at > 0 && better(id, best[at - 1] as number)) at--;
    best.splice(at, 0, id);
    if (best.length > k) best.pop();
  }
  return best;
}
