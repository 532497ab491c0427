/**
 * Causal grouped-query attention for training, forward and backward, in plain TypeScript
 * (its O(seq^2 headDim) work is small beside the projections' at the sequence lengths the
 * trainer uses). Query head h reads kv head floor(h / (heads / kvHeads)).
 *
 * Shapes (row b's token t at position t):
 *   q, dq: [rows, seq, heads, headDim]     k, v, dk, dv: [rows, seq, kvHeads, headDim]
 *   out, dout: [rows, seq, heads, headDim] probs: [rows, heads, seq, seq] (j <= t filled)
 */
export interface AttentionShape {
  rows: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

export function attentionForward(
  s: AttentionShape,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  out: Float32Array,
  probs: Float32Array,
): void {
  const { rows, seq, heads, kvHeads, headDim: d } = s;
  const group = heads / kvHeads;
  const scale = 1 / Math.sqrt(d);
  const row = new Float64Array(seq);
  for (let b = 0; b < rows; b++) {
    for (let h = 0; h < heads; h++) {
      const kh = Math.floor(h / group);
      for (let t = 0; t < seq; t++) {
        const qo = ((b * seq + t) * heads + h) * d;
        let max = -Infinity;
        for (let j = 0; j <= t; j++) {
          const ko = ((b * seq + j) * kvHeads + kh) * d;
          let dot = 0;
          for (let i = 0; i < d; i++) dot += (q[qo + i] as number) * (k[ko + i] as number);
          row[j] = dot * scale;
          max = Math.max(max, row[j] as number);
        }
        let sum = 0;
        for (let j = 0; j <= t; j++) {
          row[j] = Math.exp((row[j] as number) - max);
          sum += row[j] as number;
        }
        const po = ((b * heads + h) * seq + t) * seq;
        out.fill(0, qo, qo + d);
        for (let j = 0; j <= t; j++) {
          const p = (row[j] as number) / sum;
          probs[po + j] = p;
          const vo = ((b * seq + j) * kvHeads + kh) * d;
          for (let i = 0; i < d; i++) out[qo + i] = (out[qo + i] as number) + p * (v[vo + i] as number);
        }
      }
    }
  }
}

/**
 * dp_j = dout . v_j; ds_j = p_j (dp_j - sum_i p_i dp_i); dq = scale sum_j ds_j k_j;
 * dk_j += scale ds_j q; dv_j += p_j dout. dq, dk, dv are overwritten.
 */
export function attentionBackward(
  s: AttentionShape,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  probs: Float32Array,
  dout: Float32Array,
  dq: Float32Array,
  dk: Float32Array,
  dv: Float32Array,
): void {
  const { rows, seq, heads, kvHeads, headDim: d } = s;
  const group = heads / kvHeads;
  const scale = 1 / Math.sqrt(d);
  const dp = new Float64Array(seq);
  dq.fill(0);
  dk.fill(0);
  dv.fill(0);
  for (let b = 0; b < rows; b++) {
    for (let h = 0; h < heads; h++) {
      const kh = Math.floor(h / group);
      for (let t = 0; t < seq; t++) {
        const qo = ((b * seq + t) * heads + h) * d;
        const po = ((b * heads + h) * seq + t) * seq;
        let mean = 0;
        for (let j = 0; j <= t; j++) {
          const vo = ((b * seq + j) * kvHeads + kh) * d;
          let dot = 0;
          for (let i = 0; i < d; i++) dot += (dout[qo + i] as number) * (v[vo + i] as number);
          dp[j] = dot;
          mean += (probs[po + j] as number) * dot;
        }
        for (let j = 0; j <= t; j++) {
          const p = probs[po + j] as number;
          const ds = p * ((dp[j] as number) - mean) * scale;
          const ko = ((b * seq + j) * kvHeads + kh) * d;
          for (let i = 0; i < d; i++) {
            dq[qo + i] = (dq[qo + i] as number) + ds * (k[ko + i] as number);
            dk[ko + i] = (dk[ko + i] as number) + ds * (q[qo + i] as number);
            dv[ko + i] = (dv[ko + i] as number) + p * (dout[qo + i] as number);
          }
        }
      }
    }
  }
}
