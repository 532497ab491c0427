/**
 * A model's architecture numbers, as much as a forecast needs: enough to count the weights a
 * token reads, the KV cache a position holds and the bytes a collective carries. Counts are
 * of parameters (not bytes); the quantization turns them into bytes (quant.ts).
 */
export interface ModelShape {
  id: string;
  name: string;
  /** Where the numbers come from (the model's config.json, or the GGUF header). */
  source: string;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** The dense feed-forward width (the dense layers' width in a mixture of experts). */
  ffn: number;
  vocab: number;
  tiedEmbeddings: boolean;
  /** Mixture of experts: routed experts, active per token, always-on shared experts, an expert's width. */
  moe?: { experts: number; active: number; shared: number; expertFfn: number; denseLayers: number };
  /** Multi-head latent attention (DeepSeek V3, Kimi K2): the cache holds the latent, not K and V. */
  mla?: { qLoraRank: number; kvLoraRank: number; ropeDim: number; nopeDim: number; vDim: number };
}

/** Parameters of one layer's attention. */
export function attentionParams(m: ModelShape): number {
  const h = m.hidden;
  if (m.mla) {
    const a = m.mla;
    const q =
      a.qLoraRank > 0
        ? h * a.qLoraRank + a.qLoraRank * m.heads * (a.nopeDim + a.ropeDim)
        : h * m.heads * (a.nopeDim + a.ropeDim);
    const kv = h * (a.kvLoraRank + a.ropeDim) + a.kvLoraRank * m.heads * (a.nopeDim + a.vDim);
    return q + kv + m.heads * a.vDim * h;
  }
  return 2 * h * m.heads * m.headDim + 2 * h * m.kvHeads * m.headDim;
}

/** Parameter counts: in all, those one token reads (embedding row aside), and per layer. */
export interface ParamCounts {
  total: number;
  /** Read per token: attention, the dense or active experts' feed-forward, the output head. */
  active: number;
  /** Embedding table and output head (the head is the table itself when tied). */
  embedding: number;
  head: number;
  /** Per layer, in all and read per token. */
  layer: { total: number; active: number }[];
  /** Per layer, one routed expert's parameters (0 for dense layers). */
  expert: number[];
}

export function paramCounts(m: ModelShape): ParamCounts {
  const h = m.hidden;
  const attn = attentionParams(m);
  const layer: { total: number; active: number }[] = [];
  const expert: number[] = [];
  for (let i = 0; i < m.layers; i++) {
    const moe = m.moe && i >= m.moe.denseLayers ? m.moe : undefined;
    if (!moe) {
      const ffn = 3 * h * m.ffn;
      layer.push({ total: attn + ffn, active: attn + ffn });
      expert.push(0);
      continue;
    }
    const one = 3 * h * moe.expertFfn;
    const router = h * moe.experts;
    layer.push({
      total: attn + router + (moe.experts + moe.shared) * one,
      active: attn + router + (moe.active + moe.shared) * one,
    });
    expert.push(one);
  }
  const embedding = m.vocab * h;
  const head = m.tiedEmbeddings ? 0 : m.vocab * h;
  const sum = (f: (l: { total: number; active: number }) => number): number =>
    layer.reduce((a, l) => a + f(l), 0);
  return {
    total: sum((l) => l.total) + embedding + head,
    active: sum((l) => l.active) + m.vocab * h,
    embedding,
    head,
    layer,
    expert,
  };
}

/** KV cache elements per position over all layers (the MLA latent and its rope part, else K and V). */
export function kvElementsPerPosition(m: ModelShape): number {
  if (m.mla) return m.layers * (m.mla.kvLoraRank + m.mla.ropeDim);
  return m.layers * 2 * m.kvHeads * m.headDim;
}
