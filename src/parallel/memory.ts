import type { ModelConfig } from '../engine/model/config.js';
import { matrixShape, rowBytes, type TensorEntry } from '../engine/model/model-file.js';
import {
  expertsInLayer,
  kvHeadsFor,
  rangeLength,
  type Range,
  type ShardSpec,
} from '../engine/model/shard.js';
import {
  exchangeBufferBytes,
  fabricFootprint,
  linkBufferBytes,
  usesDirectExchange,
  type ProviderName,
} from '../collectives/index.js';
import type { ParallelPlan } from './plan.js';

export interface MemoryOptions {
  /** Positions of KV cache per sequence (default the model's context length). */
  contextLength?: number;
  kvType?: 'f32' | 'f16';
  /** Sequences whose KV caches a shard holds at once (a server's slots; default 1). */
  sequences?: number;
}

/**
 * Bytes a shard holds once loaded: its weight slices (at their file type) plus the KV cache of
 * each sequence it serves at once.
 * Mirrors what the engine's loader reads, so a plan can be checked before anything loads.
 */
export function shardBytes(
  c: ModelConfig,
  tensors: ReadonlyMap<string, TensorEntry>,
  s: ShardSpec,
  o: MemoryOptions = {},
): number {
  const bytesOf = (name: string, rows?: Range, cols?: Range, rowsTotal?: number): number => {
    const t = tensors.get(name);
    if (!t) return 0;
    const shape = matrixShape(t);
    const r = rows ? rangeLength(rows) : (rowsTotal ?? shape.rows);
    const width = cols ? rangeLength(cols) : shape.cols;
    if (r === 0 || width === 0) return 0;
    return r * rowBytes(t.type, shape.cols) * (width / shape.cols);
  };
  const hd = c.headDim;
  const width = c.embeddingLength;
  const kv = kvHeadsFor(c, s.heads);
  const qRows = { start: s.heads.start * hd, end: s.heads.end * hd };
  const kvRows = { start: kv.start * hd, end: kv.end * hd };
  let total = 0;
  if (s.embed) total += bytesOf('token_embd.weight');
  for (let i = s.layers.start; i < s.layers.end; i++) {
    const p = `blk.${i}.`;
    total += 4 * width * 2;
    total +=
      bytesOf(`${p}attn_q.weight`, qRows) +
      bytesOf(`${p}attn_k.weight`, kvRows) +
      bytesOf(`${p}attn_v.weight`, kvRows);
    total += bytesOf(`${p}attn_output.weight`, undefined, qRows);
    if (c.expertCount > 0) {
      total += bytesOf(`${p}ffn_gate_inp.weight`);
      // One expert's share of a 3-D expert tensor, cut to this shard's hidden units.
      const perExpert = (name: string): number =>
        (bytesOf(name) / c.expertCount) * (rangeLength(s.expertFfn) / c.expertFeedForwardLength);
      const one =
        perExpert(`${p}ffn_gate_exps.weight`) +
        perExpert(`${p}ffn_up_exps.weight`) +
        perExpert(`${p}ffn_down_exps.weight`);
      total += one * expertsInLayer(s, i).length;
      total +=
        bytesOf(`${p}ffn_gate_shexp.weight`, s.sharedFfn) +
        bytesOf(`${p}ffn_up_shexp.weight`, s.sharedFfn) +
        bytesOf(`${p}ffn_down_shexp.weight`, undefined, s.sharedFfn);
    } else {
      total +=
        bytesOf(`${p}ffn_gate.weight`, s.ffn) +
        bytesOf(`${p}ffn_up.weight`, s.ffn) +
        bytesOf(`${p}ffn_down.weight`, undefined, s.ffn);
    }
  }
  if (s.head) {
    const tied = !tensors.has('output.weight');
    const wholeVocab = s.vocab.start === 0 && s.vocab.end === c.vocabSize;
    if (!(tied && wholeVocab && s.embed))
      total += bytesOf(tied ? 'token_embd.weight' : 'output.weight', s.vocab);
    total += 4 * width;
  }
  const ctx = Math.min(o.contextLength ?? c.contextLength, c.contextLength);
  const kvBytes =
    2 *
    rangeLength(s.layers) *
    rangeLength(kv) *
    hd *
    ctx *
    (o.kvType === 'f16' ? 2 : 4) *
    (o.sequences ?? 1);
  return Math.ceil(total + kvBytes);
}

/**
 * Bytes of a node's communication buffers in a plan over `provider`: its fabric device and
 * one connection and one pair of slot regions per other node (the world is a full mesh),
 * and, where groups use the direct exchange, a second device with a connection per group
 * peer and the exchange's inboxes and outbox. Kernel socket buffers are not counted.
 */
export function commBytes(plan: Pick<ParallelPlan, 'nodes' | 'tpSize'>, provider: ProviderName): number {
  if (plan.nodes <= 1) return 0;
  const fab = fabricFootprint(provider);
  let bytes = fab.device + (plan.nodes - 1) * (fab.perConnection + linkBufferBytes());
  if (usesDirectExchange(provider) && plan.tpSize > 1)
    bytes += fab.device + (plan.tpSize - 1) * fab.perConnection + exchangeBufferBytes(plan.tpSize);
  return bytes;
}

/** Bytes of the whole model on one node (same accounting). */
export function modelBytes(
  c: ModelConfig,
  tensors: ReadonlyMap<string, TensorEntry>,
  whole: ShardSpec,
  o: MemoryOptions = {},
): number {
  return shardBytes(c, tensors, whole, o);
}

export function formatBytes(n: number): string {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(2)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

/** Parses 512M, 1.5G, 100000 (bytes; K/M/G/T are powers of 1024). */
export function parseBytes(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$/i.exec(text);
  if (!m) return undefined;
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[
    m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g' | 't'
  ];
  return Math.floor(Number(m[1]) * scale);
}
