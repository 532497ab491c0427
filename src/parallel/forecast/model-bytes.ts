import { GgufModelFile, configFromMetadata } from '../../engine/index.js';
import { kvElementsPerPosition, paramCounts, type ModelShape } from './model-shape.js';
import type { PrefillShape } from './machine-list.js';
import { quantBits, type QuantName } from './quant.js';

/**
 * What a forecast needs of a model, in bytes as stored: each layer's weights in all and
 * those one token reads, one routed expert's bytes, the embedding table and the output
 * head, the KV cache per position (f16), and the parameters a token multiplies by (FLOPs).
 */
export interface ModelBytes {
  name: string;
  source: string;
  hidden: number;
  heads: number;
  headDim: number;
  /** Vocabulary size (tensor parallel gathers this many logits a step). */
  vocab: number;
  layers: { total: number; active: number; expert: number }[];
  embedding: number;
  head: number;
  kvBytesPerPosition: number;
  /** Parameters one token multiplies by (2 FLOPs each). */
  activeParams: number;
  totalParams: number;
  moe?: { experts: number; active: number };
}

export function bytesFromShape(m: ModelShape, quant: QuantName): ModelBytes {
  const bits = quantBits[quant];
  const b = (params: number): number => (params * bits) / 8;
  const p = paramCounts(m);
  return {
    name: `${m.name} ${quant}`,
    source: m.source,
    hidden: m.hidden,
    heads: m.heads,
    headDim: m.headDim,
    vocab: m.vocab,
    layers: p.layer.map((l, i) => ({ total: b(l.total), active: b(l.active), expert: b(p.expert[i]!) })),
    embedding: b(p.embedding),
    head: b(p.head),
    kvBytesPerPosition: 2 * kvElementsPerPosition(m),
    activeParams: p.active,
    totalParams: p.total,
    ...(m.moe ? { moe: { experts: m.moe.experts, active: m.moe.active } } : {}),
  };
}

/** The same figures from a GGUF file's header (tensor types and sizes; no weights are read). */
export function bytesFromGguf(path: string): ModelBytes {
  const file = GgufModelFile.open(path);
  try {
    const config = configFromMetadata(
      (k) => file.meta(k),
      new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
    );
    const layers = Array.from({ length: config.blockCount }, () => ({ total: 0, active: 0, expert: 0 }));
    const experts = config.expertCount;
    const used = config.expertUsedCount;
    let embedding = 0;
    let head = 0;
    let totalParams = 0;
    let activeParams = 0;
    for (const t of file.gguf.tensors) {
      const { name, elements: count, byteLength: size } = t;
      totalParams += count;
      const block = /^blk\.(\d+)\./.exec(name);
      if (!block) {
        if (name === 'token_embd.weight') embedding += size;
        else head += size; // output head and final norm
        if (name !== 'token_embd.weight') activeParams += count;
        continue;
      }
      const layer = layers[Number(block[1])];
      if (!layer) continue;
      layer.total += size;
      if (/_exps\./.test(name) && experts > 0) {
        layer.active += (size * used) / experts;
        layer.expert += size / experts;
        activeParams += (count * used) / experts;
      } else {
        layer.active += size;
        activeParams += count;
      }
    }
    if (head === 0) activeParams += config.vocabSize * config.embeddingLength; // tied: the table is the head
    return {
      name: path,
      source: `${path} (GGUF header)`,
      hidden: config.embeddingLength,
      heads: config.headCount,
      headDim: config.headDim,
      vocab: config.vocabSize,
      layers,
      embedding,
      head,
      kvBytesPerPosition: 2 * config.blockCount * config.headCountKv * 2 * config.headDim,
      activeParams,
      totalParams,
      ...(experts > 0 ? { moe: { experts, active: used } } : {}),
    };
  } finally {
    file.close();
  }
}

/**
 * The layer shape the prefill probe runs to stand for `m` at a prompt of `tokens`: its width
 * and attention heads; KV heads from the cache's bytes a position (f16 K and V a layer); the
 * feed-forward width that gives a layer its parameters beyond attention (a mixture of experts:
 * its active experts' as one dense SwiGLU).
 */
export function prefillShapeOf(m: ModelBytes, tokens: number): PrefillShape {
  const L = m.layers.length;
  const kvHeads = Math.max(1, Math.round(m.kvBytesPerPosition / (4 * L * m.headDim)));
  const attention = 2 * m.hidden * (m.heads + kvHeads) * m.headDim;
  const layerParams = (m.activeParams - m.vocab * m.hidden) / L;
  const ff = Math.max(32, Math.round((layerParams - attention) / (3 * m.hidden) / 32) * 32);
  return { hidden: m.hidden, heads: m.heads, kvHeads, headDim: m.headDim, ff, tokens };
}
