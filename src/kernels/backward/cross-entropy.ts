/**
 * Cross-entropy over n rows of logits [n, vocab] against targets [n], and its gradient
 * written over the logits in place: dlogits = (softmax - onehot(target)) / denominator.
 * Sums run in f64 per row with the row maximum subtracted. Returns the summed loss over
 * denominator in nats (the mean when denominator = n, the default; a data-parallel rank
 * passes the global token count so that the ranks' results and gradients sum to the mean's).
 */
export function crossEntropyInPlace(
  logits: Float32Array,
  targets: ArrayLike<number>,
  n: number,
  vocab: number,
  denominator = n,
): number {
  let total = 0;
  for (let t = 0; t < n; t++) {
    const o = t * vocab;
    let max = -Infinity;
    for (let j = 0; j < vocab; j++) max = Math.max(max, logits[o + j] as number);
    const target = targets[t] as number;
    const picked = logits[o + target] as number;
    // one exp per entry: kept in place (f32) and scaled once the row's sum is known
    let sum = 0;
    for (let j = 0; j < vocab; j++) {
      const e = Math.exp((logits[o + j] as number) - max);
      logits[o + j] = e;
      sum += e;
    }
    total += Math.log(sum) + max - picked;
    const scale = 1 / (sum * denominator);
    for (let j = 0; j < vocab; j++) logits[o + j] = (logits[o + j] as number) * scale;
    logits[o + target] = (logits[o + target] as number) - 1 / denominator;
  }
  return total / denominator;
}

/** The mean loss alone, leaving the logits untouched (evaluation). */
export function crossEntropyLoss(
  logits: Float32Array,
  targets: ArrayLike<number>,
  n: number,
  vocab: number,
): number {
  let total = 0;
  for (let t = 0; t < n; t++) {
    const o = t * vocab;
    let max = -Infinity;
    for (let j = 0; j < vocab; j++) max = Math.max(max, logits[o + j] as number);
    let sum = 0;
    for (let j = 0; j < vocab; j++) sum += Math.exp((logits[o + j] as number) - max);
    total += Math.log(sum) + max - (logits[o + (targets[t] as number)] as number);
  }
  return total / n;
}
