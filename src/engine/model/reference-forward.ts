import type { ModelConfig } from './config.js';
import type { MemoryModelFile } from './model-file.js';

/**
 * A deliberately naive float64 forward pass over a whole token sequence (no KV cache,
 * attention recomputed), written straight from the architecture definitions. It reads F32
 * tensors only and exists to check the engine's model code in unit tests.
 */
export function referenceLogits(
  file: MemoryModelFile,
  c: ModelConfig,
  tokens: readonly number[],
): Float64Array {
  const t = (name: string): Float32Array => {
    const bytes = file.readRows(name, 0, rowsOf(file, name));
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  };
  const W = c.embeddingLength;
  const hd = c.headDim;
  const n = tokens.length;
  const embd = t('token_embd.weight');
  let x: Float64Array[] = tokens.map((id) => Float64Array.from(embd.subarray(id * W, (id + 1) * W)));
  const freqFactors = file.tensors.has('rope_freqs.weight') ? t('rope_freqs.weight') : undefined;
  for (let l = 0; l < c.blockCount; l++) {
    const p = `blk.${l}.`;
    const xn = x.map((row) => rms(row, t(`${p}attn_norm.weight`), c.rmsEps));
    const q = xn.map((row) =>
      linear(t(`${p}attn_q.weight`), row, c.headCount * hd, c.hasQkvBias ? t(`${p}attn_q.bias`) : undefined),
    );
    const k = xn.map((row) =>
      linear(
        t(`${p}attn_k.weight`),
        row,
        c.headCountKv * hd,
        c.hasQkvBias ? t(`${p}attn_k.bias`) : undefined,
      ),
    );
    const v = xn.map((row) =>
      linear(
        t(`${p}attn_v.weight`),
        row,
        c.headCountKv * hd,
        c.hasQkvBias ? t(`${p}attn_v.bias`) : undefined,
      ),
    );
    for (let i = 0; i < n; i++) {
      if (c.hasQkNorm) {
        headNorm(q[i]!, t(`${p}attn_q_norm.weight`), hd, c.rmsEps);
        headNorm(k[i]!, t(`${p}attn_k_norm.weight`), hd, c.rmsEps);
      }
      rope(q[i]!, i, c, freqFactors);
      rope(k[i]!, i, c, freqFactors);
    }
    const group = c.headCount / c.headCountKv;
    const att = q.map((qi, i) => {
      const out = new Float64Array(c.headCount * hd);
      for (let h = 0; h < c.headCount; h++) {
        const kvh = Math.floor(h / group);
        const scores = new Float64Array(i + 1);
        for (let s = 0; s <= i; s++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += qi[h * hd + d]! * k[s]![kvh * hd + d]!;
          scores[s] = dot / Math.sqrt(hd);
        }
        softmax(scores);
        for (let s = 0; s <= i; s++)
          for (let d = 0; d < hd; d++) out[h * hd + d]! += scores[s]! * v[s]![kvh * hd + d]!;
      }
      return out;
    });
    x = x.map((row, i) => add(row, linear(t(`${p}attn_output.weight`), att[i]!, W)));
    const hn = x.map((row) => rms(row, t(`${p}ffn_norm.weight`), c.rmsEps));
    x = x.map((row, i) =>
      add(row, c.expertCount > 0 ? moe(t, c, p, hn[i]!) : ffn(t, p, '', hn[i]!, c.feedForwardLength, W)),
    );
  }
  const last = rms(x[n - 1]!, t('output_norm.weight'), c.rmsEps);
  return linear(t(c.tiedEmbeddings ? 'token_embd.weight' : 'output.weight'), last, c.vocabSize);
}

function rowsOf(file: MemoryModelFile, name: string): number {
  const dims = file.tensors.get(name)!.dims;
  return dims.slice(1).reduce((a, b) => a * b, 1);
}

function linear(w: Float32Array, x: Float64Array, rows: number, bias?: Float32Array, base = 0): Float64Array {
  const cols = x.length;
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = bias ? bias[r]! : 0;
    const o = (base + r) * cols;
    for (let i = 0; i < cols; i++) s += w[o + i]! * x[i]!;
    y[r] = s;
  }
  return y;
}

function rms(x: Float64Array, w: Float32Array, eps: number): Float64Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const scale = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * scale * w[i]!);
}

function headNorm(x: Float64Array, w: Float32Array, hd: number, eps: number): void {
  for (let h = 0; h < x.length / hd; h++) x.set(rms(x.subarray(h * hd, (h + 1) * hd), w, eps), h * hd);
}

function rope(x: Float64Array, pos: number, c: ModelConfig, factors?: Float32Array): void {
  const hd = c.headDim;
  for (let h = 0; h < x.length / hd; h++) {
    for (let i = 0; i < hd / 2; i++) {
      const theta =
        (pos * c.ropeFreqScale * Math.pow(c.ropeFreqBase, (-2 * i) / hd)) / (factors ? factors[i]! : 1);
      const [a, b] =
        c.ropeStyle === 'normal' ? [h * hd + 2 * i, h * hd + 2 * i + 1] : [h * hd + i, h * hd + i + hd / 2];
      const x0 = x[a]!;
      const x1 = x[b]!;
      x[a] = x0 * Math.cos(theta) - x1 * Math.sin(theta);
      x[b] = x0 * Math.sin(theta) + x1 * Math.cos(theta);
    }
  }
}

function softmax(x: Float64Array): void {
  const max = Math.max(...x);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += x[i] = Math.exp(x[i]! - max);
  for (let i = 0; i < x.length; i++) x[i]! /= sum;
}

function add(a: Float64Array, b: Float64Array): Float64Array {
  return a.map((v, i) => v + b[i]!);
}

function ffn(
  t: (n: string) => Float32Array,
  p: string,
  kind: string,
  x: Float64Array,
  ff: number,
  width: number,
  expert = 0,
): Float64Array {
  const g = linear(t(`${p}ffn_gate${kind}.weight`), x, ff, undefined, expert * ff);
  const u = linear(t(`${p}ffn_up${kind}.weight`), x, ff, undefined, expert * ff);
  const h = g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!);
  return linear(t(`${p}ffn_down${kind}.weight`), h, width, undefined, expert * width);
}

function moe(t: (n: string) => Float32Array, c: ModelConfig, p: string, x: Float64Array): Float64Array {
  const W = c.embeddingLength;
  const probs = linear(t(`${p}ffn_gate_inp.weight`), x, c.expertCount);
  softmax(probs);
  const order = [...probs.keys()].sort((a, b) => probs[b]! - probs[a]! || a - b).slice(0, c.expertUsedCount);
  const total = order.reduce((s, e) => s + probs[e]!, 0);
  let out = new Float64Array(W);
  for (const e of order) {
    const w = c.expertWeightsNorm ? probs[e]! / total : probs[e]!;
    const y = ffn(t, p, '_exps', x, c.expertFeedForwardLength, W, e);
    out = out.map((v, i) => v + w * y[i]!);
  }
  if (c.sharedExpertFeedForwardLength > 0) {
    const gi = t(`${p}ffn_gate_inp_shexp.weight`);
    let dot = 0;
    for (let i = 0; i < W; i++) dot += gi[i]! * x[i]!;
    const gate = 1 / (1 + Math.exp(-dot));
    const y = ffn(t, p, '_shexp', x, c.sharedExpertFeedForwardLength, W);
    out = out.map((v, i) => v + gate * y[i]!);
  }
  return out;
}
