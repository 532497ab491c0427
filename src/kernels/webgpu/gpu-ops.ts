import { GgmlType } from '../types.js';
import type { GpuDevice } from './gpu-device.js';
import { isKQuant, type GpuWeight } from './gpu-weights.js';
import {
  MATMUL_F16,
  MATMUL_F32,
  MATMUL_Q4_0,
  MATMUL_Q4K,
  MATMUL_Q6K,
  MATMUL_Q8_0,
  QUANTIZE_Q8,
  QUANTIZE_Q8K,
  TILE_ROWS,
  TILE_TOKENS,
  TILED_F16,
  TILED_F32,
  TILED_Q4_0,
  TILED_Q4K,
  TILED_Q6K,
  TILED_Q8_0,
} from './wgsl-matmul.js';
import { COMBINE, ROUTE_TOPK, SHARED_GATE, listedMatmul } from './wgsl-moe.js';
import { ADD, ADD_BIAS, ATTENTION, COPY, RMS_NORM, ROPE, SWIGLU } from './wgsl-ops.js';

/** Words of one activation row [cols] in q8_0 (q8_K): quants cols / 4, scales cols / 32 (cols / 256). */
const q8Words = (cols: number): number => cols / 4 + cols / 32;

/** Workgroups for `threads` threads of 64, as (x, y) within the per-dimension limit. */
function groups1d(threads: number): [number, number] {
  const g = Math.max(1, Math.ceil(threads / 64));
  return [Math.min(g, 65535), Math.ceil(g / 65535)];
}

function params(u32: readonly number[], f32: readonly number[] = []): ArrayBuffer {
  const buffer = new ArrayBuffer(4 * (u32.length + f32.length));
  new Uint32Array(buffer, 0, u32.length).set(u32);
  new Float32Array(buffer, 4 * u32.length, f32.length).set(f32);
  return buffer;
}

export interface AttentionShape {
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Position of the first query token. */
  pos0: number;
  n: number;
  /** Floats per (token, head) row of the scores scratch: at least pos0 + n. */
  stride: number;
  scale: number;
  /** The first row of q, out and the scores these n tokens take (default 0). */
  t0?: number;
  /**
   * Query heads per KV head in the whole model, and where head 0 sits in its group: head h
   * attends with KV head (h + headOffset) / group. Defaults heads / kvHeads and 0; a
   * tensor-parallel shard whose heads start inside a group (3 ranks over 2 KV heads) passes
   * the model's group and its first head's place in it.
   */
  group?: number;
  headOffset?: number;
}

/** One MoE step's routing on the GPU (wgsl-moe.ts): probabilities, choices, per-expert slot lists. */
export interface MoeRouting {
  /** [n, experts] router logits, turned into probabilities. */
  probs: GPUBuffer;
  /** [n, used] u32 expert ids. */
  ids: GPUBuffer;
  /** [n, used] f32 routing weights. */
  weights: GPUBuffer;
  /** counts [experts], then each expert's slots (wgsl-moe.ts). */
  lists: GPUBuffer;
  experts: number;
  used: number;
}

/** Per-expert slot lists (MoeRouting's, or lists written by the host) and their expert count and choices per token. */
export type SlotLists = Pick<MoeRouting, 'lists' | 'experts' | 'used'>;

/**
 * The kernels of a llama layer recorded on GPU buffers (f32 activations, row-major, shapes
 * in comments). Nothing here reads back: the caller reads the result it wants
 * (GpuDevice.read), which submits everything recorded before it.
 */
export class GpuOps {
  /** The activation in q8_0 for Q8_0/Q4_0 matmuls, grown as needed. */
  private xq: GPUBuffer | undefined;
  private xqWords = 0;

  constructor(readonly gpu: GpuDevice) {}

  /**
   * y[t, yOffset + r] = sum_c W[r, c] x[t, c] for n tokens; yStride floats between tokens'
   * rows of y (default W's rows). x: [n, cols]. Several tokens run tiled (a tile of rows x
   * tokens per workgroup, each weight block fetched once per tile) unless `perRow`, where
   * each (row, token) output has a workgroup of its own (decode rows: the same dispatch a
   * token alone gets). Both give an output the same sums (wgsl-matmul.ts).
   */
  matmul(
    w: GpuWeight,
    x: GPUBuffer,
    y: GPUBuffer,
    n: number,
    yStride = w.rows,
    yOffset = 0,
    perRow = false,
  ): void {
    const xin = this.prepare(w, x, n);
    const tiled = n > 1 && !perRow;
    const [name, code] = kernelFor(w.type, tiled);
    for (const c of w.chunks) {
      const p = params([c.rows, w.cols, yStride, yOffset + c.rowStart, c.scales, (n * w.cols) / 4, n]);
      const groups = tiled ? [Math.ceil(c.rows / TILE_ROWS), Math.ceil(n / TILE_TOKENS)] : [c.rows, n];
      this.gpu.dispatch(name, code, p, [c.buffer, xin, y], groups);
    }
  }

  /**
   * The activation x [rows, w.cols] in w's dot type: x itself for F32/F16, else q8_0 or q8_K
   * in the scratch (valid until the next prepare or matmul is recorded).
   */
  prepare(w: GpuWeight, x: GPUBuffer, rows: number): GPUBuffer {
    const q8 = w.type === GgmlType.Q8_0 || w.type === GgmlType.Q4_0;
    return q8 || isKQuant(w.type) ? this.quantize(x, rows, w.cols, q8 ? 32 : 256) : x;
  }

  /**
   * Expert `expert`'s matmul over the slots routed to it (wgsl-moe.ts): for each slot s in
   * its list, y[s, r] = sum_c W[r, c] xin[s / div, c]. xin: from `prepare` of the same weight
   * type ([n, cols] with div = used, [n * used, cols] with div 1); y: [n * used, w.rows].
   */
  matmulListed(
    w: GpuWeight,
    xin: GPUBuffer,
    y: GPUBuffer,
    n: number,
    expert: number,
    route: SlotLists,
    div: number,
  ): void {
    const [name] = kernelFor(w.type, false);
    const type = name.slice('matmul_'.length);
    const xRows = div === 1 ? n * route.used : n;
    for (const c of w.chunks) {
      const p = params([
        c.rows,
        w.cols,
        w.rows,
        c.rowStart,
        c.scales,
        (xRows * w.cols) / 4,
        n,
        expert,
        route.experts,
        div,
      ]);
      this.gpu.dispatch(
        `listed_${type}`,
        listedMatmul(type),
        p,
        [c.buffer, xin, y, route.lists],
        [c.rows, n],
      );
    }
  }

  /** Softmax and top-k of n tokens' router logits, and every expert's slot list. */
  routeTopK(route: MoeRouting, n: number, norm: boolean): void {
    const p = params([n, route.experts, route.used, norm ? 1 : 0]);
    this.gpu.dispatch('route_topk', ROUTE_TOPK, p, [route.probs, route.ids, route.weights, route.lists], [1]);
  }

  /** out [n, width] = each token's expert outputs y [n * used, width] weighted, in ascending expert id. */
  combine(route: MoeRouting, y: GPUBuffer, out: GPUBuffer, n: number, width: number): void {
    const p = params([n, route.used, width]);
    const bufs = [route.ids, route.weights, y, out];
    this.gpu.dispatch('combine', COMBINE, p, bufs, groups1d(n * width));
  }

  /** out[t] += sigmoid(x[t] . gate) * y[t] for n tokens (the shared expert). x, y, out: [n, width]. */
  sharedGate(x: GPUBuffer, gate: GPUBuffer, y: GPUBuffer, out: GPUBuffer, n: number, width: number): void {
    this.gpu.dispatch('shared_gate', SHARED_GATE, params([width]), [x, gate, y, out], [n]);
  }

  /** x[t] += b for the n rows of x [n, len]. */
  addBias(x: GPUBuffer, b: GPUBuffer, n: number, len: number): void {
    this.gpu.dispatch('add_bias', ADD_BIAS, params([n * len, len]), [b, x], groups1d(n * len));
  }

  /** x [n, cols] f32 to q8_0 (block 32) or q8_K (block 256) in the scratch (quants [n, cols / 4] words, then scales). */
  private quantize(x: GPUBuffer, n: number, cols: number, block: 32 | 256): GPUBuffer {
    const words = n * q8Words(cols);
    if (!this.xq || this.xqWords < words) {
      // the old buffer may be bound in the recorded pass: submit that before destroying it
      this.gpu.flush();
      this.xq?.destroy();
      this.xqWords = Math.max(words, 2 * this.xqWords);
      this.xq = this.gpu.storage(4 * this.xqWords, 'activation q8_0/q8_K');
    }
    const blocks = (n * cols) / block;
    const [name, code] = block === 32 ? ['quantize_q8', QUANTIZE_Q8] : ['quantize_q8k', QUANTIZE_Q8K];
    this.gpu.dispatch(name, code, params([blocks, (n * cols) / 4]), [x, this.xq], groups1d(blocks));
    return this.xq;
  }

  /** out = rmsNorm(x) * weight per token. x, out: [n, dim] (distinct); weight: [dim]. */
  rmsNorm(x: GPUBuffer, weight: GPUBuffer, eps: number, out: GPUBuffer, n: number, dim: number): void {
    this.gpu.dispatch('rms_norm', RMS_NORM, params([dim], [eps]), [x, weight, out], [n]);
  }

  /** Rotates x [n, heads, headDim] in place by cs (cos [n, half], sin [n, half]). */
  rope(
    x: GPUBuffer,
    cs: GPUBuffer,
    n: number,
    heads: number,
    headDim: number,
    half: number,
    neox: boolean,
  ): void {
    const threads = n * heads * half;
    this.gpu.dispatch(
      'rope',
      ROPE,
      params([n, heads, headDim, half, neox ? 1 : 0]),
      [cs, x],
      groups1d(threads),
    );
  }

  /** out = silu(gate) * up. All [len]; out distinct from gate and up. */
  swiglu(gate: GPUBuffer, up: GPUBuffer, out: GPUBuffer, len: number): void {
    this.gpu.dispatch('swiglu', SWIGLU, params([len]), [gate, up, out], groups1d(len));
  }

  /** x += y. Both [len]. */
  add(x: GPUBuffer, y: GPUBuffer, len: number): void {
    this.gpu.dispatch('add', ADD, params([len]), [y, x], groups1d(len));
  }

  /** dst[dstOffset + i] = src[srcOffset + i] for i < len (floats). */
  copy(src: GPUBuffer, dst: GPUBuffer, len: number, dstOffset: number, srcOffset = 0): void {
    this.gpu.dispatch('copy', COPY, params([len, dstOffset, srcOffset]), [src, dst], groups1d(len));
  }

  /**
   * Causal grouped-query attention. q, out: [n, heads, headDim]; k, v: [maxSeq, kvHeads,
   * headDim] holding positions up to pos0 + n - 1; scores: scratch [n, heads, stride].
   */
  attention(
    q: GPUBuffer,
    k: GPUBuffer,
    v: GPUBuffer,
    scores: GPUBuffer,
    out: GPUBuffer,
    s: AttentionShape,
  ): void {
    const group = s.group ?? s.heads / s.kvHeads;
    const p = params(
      [s.heads, s.kvHeads, s.headDim, s.pos0, s.stride, s.t0 ?? 0, group, s.headOffset ?? 0],
      [s.scale],
    );
    this.gpu.dispatch('attention', ATTENTION, p, [q, k, v, scores, out], [s.heads, s.n]);
  }

  /**
   * The kernels (name, WGSL) a model with weights of `types` records: the dense ops, each
   * type's matmuls (per row and tiled) and activation quantisation, and with `moe` the router,
   * the listed expert matmuls, the combine and the shared gate (GpuDevice.precompile).
   */
  kernels(types: Iterable<number>, moe: boolean): [string, string][] {
    const out: [string, string][] = [
      ['rms_norm', RMS_NORM],
      ['rope', ROPE],
      ['attention', ATTENTION],
      ['swiglu', SWIGLU],
      ['add', ADD],
      ['add_bias', ADD_BIAS],
      ['copy', COPY],
    ];
    if (moe) out.push(['route_topk', ROUTE_TOPK], ['combine', COMBINE], ['shared_gate', SHARED_GATE]);
    for (const type of new Set(types)) {
      const matvec = kernelFor(type, false);
      out.push(matvec, kernelFor(type, true));
      const name = matvec[0].slice('matmul_'.length);
      if (moe) out.push([`listed_${name}`, listedMatmul(name)]);
      if (type === GgmlType.Q8_0 || type === GgmlType.Q4_0) out.push(['quantize_q8', QUANTIZE_Q8]);
      else if (isKQuant(type)) out.push(['quantize_q8k', QUANTIZE_Q8K]);
    }
    return out;
  }

  destroy(): void {
    this.xq?.destroy();
    this.xq = undefined;
  }
}

function kernelFor(type: number, tiled: boolean): [string, string] {
  const pick = (name: string, matvec: string, tile: string): [string, string] =>
    tiled ? [`tiled_${name}`, tile] : [`matmul_${name}`, matvec];
  switch (type) {
    case GgmlType.F32:
      return pick('f32', MATMUL_F32, TILED_F32);
    case GgmlType.F16:
      return pick('f16', MATMUL_F16, TILED_F16);
    case GgmlType.Q8_0:
      return pick('q8_0', MATMUL_Q8_0, TILED_Q8_0);
    case GgmlType.Q4_0:
      return pick('q4_0', MATMUL_Q4_0, TILED_Q4_0);
    case GgmlType.Q6_K:
      return pick('q6k', MATMUL_Q6K, TILED_Q6K);
    default:
      return pick('q4k', MATMUL_Q4K, TILED_Q4K);
  }
}
