import { headLayout } from '../engine/model/attention.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { GroupSum } from '../engine/model/leaves.js';
import { matrixShape, type ModelFile } from '../engine/model/model-file.js';
import { kvHeadsFor, rangeLength, type Range, type ShardSpec } from '../engine/model/shard.js';
import { columnCuts, leafLayout } from '../engine/model/weights.js';
import { typeName } from '../kernels/ggml-blocks.js';
import { dequantRow } from '../kernels/ref/quant-ref.js';
import { GgmlType, type GgmlTypeId, type WeightSource } from '../kernels/types.js';
import {
  gpuRowBytes,
  gpuTypes,
  type GpuLimits,
  type GpuLlamaSpec,
  type GpuTensorReader,
} from '../kernels/webgpu/index.js';

/**
 * What a GPU shard reads of a model file, cut by the CPU shard's own arithmetic (shard.ts's
 * head and KV-head ranges, weights.ts's leaf layout of the row-parallel projections), so a GPU
 * rank holds exactly the rows and columns a CPU rank in its place would, and hands its group
 * the same number of parts.
 */

/** The part of one tensor a shard reads: rows, input columns, or (vectors) elements; none: whole. */
interface TensorSlice {
  rows?: Range;
  cols?: Range;
  elems?: Range;
}

/**
 * How a shard's tensor-parallel group adds the partial outputs of one layer (undefined: the
 * flat tree): attention's o, the dense FFN's down, the routed experts' down (every expert
 * alike) and the shared expert's down.
 */
export interface LayerSums {
  attention: GroupSum | undefined;
  ffn: GroupSum | undefined;
  experts: GroupSum | undefined;
  shared: GroupSum | undefined;
}

/** Query-head rows ([heads * headDim]) and KV rows of a shard. */
function headRows(c: ModelConfig, s: ShardSpec): { q: Range; kv: Range } {
  const hd = c.headDim;
  const kv = kvHeadsFor(c, s.heads);
  return {
    q: { start: s.heads.start * hd, end: s.heads.end * hd },
    kv: { start: kv.start * hd, end: kv.end * hd },
  };
}

/** The slice of tensor `name` the shard reads (by its GGUF name). */
function sliceOf(c: ModelConfig, s: ShardSpec, name: string): TensorSlice {
  if (name === 'output.weight') return { rows: s.vocab };
  const part = /^blk\.\d+\.(.+)$/.exec(name)?.[1];
  const { q, kv } = headRows(c, s);
  switch (part) {
    case 'attn_q.weight':
      return { rows: q };
    case 'attn_k.weight':
    case 'attn_v.weight':
      return { rows: kv };
    case 'attn_output.weight':
      return { cols: q };
    case 'attn_q.bias':
      return { elems: q };
    case 'attn_k.bias':
    case 'attn_v.bias':
      return { elems: kv };
    case 'ffn_gate.weight':
    case 'ffn_up.weight':
      return { rows: s.ffn };
    case 'ffn_down.weight':
      return { cols: s.ffn };
    case 'ffn_gate_shexp.weight':
    case 'ffn_up_shexp.weight':
      return { rows: s.sharedFfn };
    case 'ffn_down_shexp.weight':
      return { cols: s.sharedFfn };
    default:
      return {};
  }
}

/**
 * GpuLlama's tensor reader over a shard: each tensor's slice, read from the file (only the
 * rows it keeps; of a routed-expert tensor, one expert's rows). `output.weight` is the shard's
 * vocabulary rows of the output head (of `token_embd.weight` where the embeddings are tied).
 */
export function shardReader(file: ModelFile, c: ModelConfig, s: ShardSpec): GpuTensorReader {
  return async (name, expert) => {
    const source = name === 'output.weight' && !file.tensors.has(name) ? 'token_embd.weight' : name;
    const entry = file.tensors.get(source);
    if (!entry) return undefined;
    const { rows, cols } = matrixShape(entry);
    const slice = sliceOf(c, s, name);
    const per = expert && rows / expert.of;
    const r = expert
      ? { start: expert.index * per!, end: (expert.index + 1) * per! }
      : (slice.rows ?? { start: 0, end: rows });
    const data = await file.readRows(source, r.start, rangeLength(r));
    const type = entry.type as GgmlTypeId;
    const w: WeightSource = { type, rows: rangeLength(r), cols, data, name };
    if (slice.cols) return { ...w, colStart: slice.cols.start, colCount: rangeLength(slice.cols) };
    if (!slice.elems) return w;
    const all = new Float32Array(rows * cols);
    dequantRow(type, data, 0, rows * cols, all);
    const part = all.slice(slice.elems.start, slice.elems.end);
    return { type: GgmlType.F32, rows: 1, cols: part.length, data: new Uint8Array(part.buffer), name };
  };
}

/**
 * Per local layer, how the group adds the shard's parts (weights.ts's leaf layout, the CPU
 * shard's own arithmetic). A rank that holds several pieces of a sum (a group of 3) hands the
 * GPU's one part as its first piece (GpuShardModel).
 */
export function layerSums(
  file: ModelFile,
  c: ModelConfig,
  s: ShardSpec,
  group: readonly ShardSpec[],
): LayerSums[] {
  const cuts = columnCuts(file, c, group.length > 1 ? group : undefined);
  const type = (name: string): number => file.tensors.get(name)?.type ?? GgmlType.F32;
  const { q } = headRows(c, s);
  const sums: LayerSums[] = [];
  for (let i = s.layers.start; i < s.layers.end; i++) {
    const b = `blk.${i}.`;
    const o = leafLayout(type(`${b}attn_output.weight`), c.headCount * c.headDim, q, c.headDim, cuts.heads);
    const d = leafLayout(type(`${b}ffn_down.weight`), c.feedForwardLength, s.ffn, 1, cuts.ffn);
    const e = leafLayout(
      type(`${b}ffn_down_exps.weight`),
      c.expertFeedForwardLength,
      s.expertFfn,
      1,
      cuts.experts,
    );
    const sh = leafLayout(
      type(`${b}ffn_down_shexp.weight`),
      c.sharedExpertFeedForwardLength,
      s.sharedFfn,
      1,
      cuts.shared,
    );
    sums.push({ attention: o.group, ffn: d.group, experts: e.group, shared: sh.group });
  }
  return sums;
}

/** Why this shard cannot run on a GPU with `limits` (undefined: it can); `chunk` rows per pass. */
export function gpuShardRefusal(
  file: ModelFile,
  c: ModelConfig,
  s: ShardSpec,
  g: { group: readonly ShardSpec[]; tpRank: number; chunk: number; contextLength: number },
  limits: GpuLimits,
): string | undefined {
  const layout = headLayout(c, s);
  // a shard with no FFN, expert or shared-expert units adds zeros to its group's sums
  if (rangeLength(s.layers) > 0 && layout.heads === 0)
    return 'it holds no attention heads; use fewer tensor-parallel ranks';
  const binding = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  const limit = `the adapter's largest storage binding (maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize}, maxBufferSize ${limits.maxBufferSize})`;
  for (const [name, t] of file.tensors) {
    const layer = Number(/^blk\.(\d+)\./.exec(name)?.[1] ?? -1);
    const held =
      layer >= 0 ? layer >= s.layers.start && layer < s.layers.end : name === 'output.weight' && s.head;
    if (!held || t.dims.length < 2) continue;
    const slice = sliceOf(c, s, name);
    // the routed experts' down projections are cut per expert on load (GpuExpertSlice)
    const cut = name.endsWith('.ffn_down_exps.weight') ? s.expertFfn : slice.cols;
    const cols = cut ? rangeLength(cut) : matrixShape(t).cols;
    if (!gpuTypes.includes(t.type as GgmlTypeId))
      return `tensor ${name} is ${typeName(t.type as GgmlTypeId)}; the WGSL kernels read ${gpuTypes.map((x) => typeName(x)).join(', ')}`;
    if (gpuRowBytes(t.type as GgmlTypeId, cols) > binding)
      return `a row of tensor ${name} (${gpuRowBytes(t.type as GgmlTypeId, cols)} bytes) exceeds ${limit}`;
  }
  const ctx = g.contextLength;
  const buffers: [string, number][] = [
    [`a layer's KV cache at a context of ${ctx} positions`, 4 * ctx * layout.kvProjected * c.headDim],
    [`the attention scores of ${g.chunk} rows at a context of ${ctx}`, 4 * g.chunk * layout.heads * ctx],
    [`the logits of ${g.chunk} rows`, 4 * g.chunk * (s.head ? rangeLength(s.vocab) : 0)],
    [
      `the expert outputs of ${g.chunk} rows`,
      4 * g.chunk * c.expertUsedCount * Math.max(c.embeddingLength, rangeLength(s.expertFfn)),
    ],
  ];
  for (const [what, bytes] of buffers)
    if (bytes > binding) return `${what} needs a ${bytes}-byte buffer, past ${limit}`;
  return undefined;
}

/** GpuLlama's hyperparameters for a model with config `c` (the whole model). */
export function gpuLlamaSpec(c: ModelConfig, freqFactors: Float32Array | undefined): GpuLlamaSpec {
  return {
    vocabSize: c.vocabSize,
    width: c.embeddingLength,
    layers: c.blockCount,
    ffn: c.feedForwardLength,
    heads: c.headCount,
    kvHeads: c.headCountKv,
    headDim: c.headDim,
    rmsEps: c.rmsEps,
    ...(c.expertCount > 0
      ? {
          moe: {
            experts: c.expertCount,
            used: c.expertUsedCount,
            expertFfn: c.expertFeedForwardLength,
            sharedFfn: c.sharedExpertFeedForwardLength,
            norm: c.expertWeightsNorm,
          },
        }
      : {}),
    rope: {
      headDim: c.headDim,
      style: c.ropeStyle,
      freqBase: c.ropeFreqBase,
      freqScale: c.ropeFreqScale,
      ...(freqFactors ? { freqFactors } : {}),
    },
  };
}

/** The per-frequency RoPE factors of a model that has them (F32 `rope_freqs.weight`). */
export async function ropeFreqFactors(file: ModelFile, c: ModelConfig): Promise<Float32Array | undefined> {
  const entry = file.tensors.get('rope_freqs.weight');
  if (!c.hasRopeFreqFactors || !entry || entry.type !== GgmlType.F32) return undefined;
  const { cols } = matrixShape(entry);
  const data = await file.readRows('rope_freqs.weight', 0, 1);
  return new Float32Array(data.slice().buffer, 0, cols);
}
