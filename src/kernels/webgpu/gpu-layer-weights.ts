import assert from 'node:assert/strict';
import { TandemError } from '../../errors/index.js';
import { rowBytes } from '../ggml-blocks.js';
import { dequantRow } from '../ref/quant-ref.js';
import type { WeightSource } from '../types.js';
import type { GpuDevice } from './gpu-device.js';
import { destroyGpuWeight, uploadGpuWeight, type GpuWeight } from './gpu-weights.js';

/**
 * A tensor by its GGUF name as raw ggml rows; undefined when the model has none of that name.
 * `expert`: of a 3-D routed-expert tensor (held as [of * rows, cols]), only the rows of expert
 * `index`, so a shard reads the experts it holds and no others.
 */
export type GpuTensorReader = (
  name: string,
  expert?: { index: number; of: number },
) => Promise<WeightSource | undefined>;

/** A SwiGLU FFN: down(silu(gate x) * up x). */
export interface GpuFfnWeights {
  gate: GpuWeight;
  up: GpuWeight;
  down: GpuWeight;
}

/**
 * A mixture-of-experts FFN: the router [experts, width], the routed experts held (ids[i] the
 * expert id of experts[i], ascending; none where a tensor-parallel shard holds none of their
 * hidden units), the shared one (qwen2moe: its sigmoid gate, and its FFN unless the shard
 * holds none of its hidden units).
 */
export interface GpuMoeWeights {
  router: GpuWeight;
  experts: readonly GpuFfnWeights[];
  ids: readonly number[];
  shared?: { gateInp: GPUBuffer; ffn?: GpuFfnWeights };
}

/** One layer's weights: attention (with qwen2's biases, qwen3's q/k norms) and a dense or MoE FFN. */
export interface GpuLayerWeights {
  attnNorm: GPUBuffer;
  q: GpuWeight;
  k: GpuWeight;
  v: GpuWeight;
  o: GpuWeight;
  qBias?: GPUBuffer;
  kBias?: GPUBuffer;
  vBias?: GPUBuffer;
  /** [headDim]: RMSNorm over each q (k) head before RoPE. */
  qNorm?: GPUBuffer;
  kNorm?: GPUBuffer;
  ffnNorm: GPUBuffer;
  ffn?: GpuFfnWeights;
  moe?: GpuMoeWeights;
}

/**
 * The part of a layer's routed experts a shard holds: the expert ids (expert parallel places
 * whole experts), and the range of each one's hidden units (tensor parallel cuts every expert:
 * gate and up rows, down columns); absent: all of them.
 */
export interface GpuExpertSlice {
  held: readonly number[];
  hidden?: { start: number; end: number };
}

/** Reads and uploads the tensors of a layer, named as in GGUF. */
export class GpuLayerLoader {
  constructor(
    private readonly gpu: GpuDevice,
    private readonly read: GpuTensorReader,
  ) {}

  /** The tensor `name` (`expert`: one routed expert's rows of it), or a typed error naming it. */
  async need(name: string, expert?: { index: number; of: number }): Promise<WeightSource> {
    const w = await this.read(name, expert);
    if (!w)
      throw new TandemError('KERNELS_BAD_SHAPE', `the model has no tensor '${name}'`, {
        hint: 'the WebGPU forward pass runs llama, qwen2/qwen3 and their MoE GGUF files; check the file',
      });
    return { ...w, name: expert ? `${name}[${expert.index}]` : name };
  }

  async vector(name: string): Promise<GPUBuffer> {
    return this.gpu.upload(toF32(await this.need(name)), name);
  }

  async optionalVector(name: string): Promise<GPUBuffer | undefined> {
    return (await this.read(name)) ? this.vector(name) : undefined;
  }

  async matrix(name: string): Promise<GpuWeight> {
    return uploadGpuWeight(this.gpu, await this.need(name));
  }

  /** Layer l: attention, then a dense FFN, or an MoE FFN where the layer has a router. */
  async layer(l: number, experts: number, slice?: GpuExpertSlice): Promise<GpuLayerWeights> {
    const b = `blk.${l}.`;
    const w: GpuLayerWeights = {
      attnNorm: await this.vector(`${b}attn_norm.weight`),
      q: await this.matrix(`${b}attn_q.weight`),
      k: await this.matrix(`${b}attn_k.weight`),
      v: await this.matrix(`${b}attn_v.weight`),
      o: await this.matrix(`${b}attn_output.weight`),
      ffnNorm: await this.vector(`${b}ffn_norm.weight`),
    };
    for (const [key, name] of [
      ['qBias', 'attn_q.bias'],
      ['kBias', 'attn_k.bias'],
      ['vBias', 'attn_v.bias'],
      ['qNorm', 'attn_q_norm.weight'],
      ['kNorm', 'attn_k_norm.weight'],
    ] as const) {
      const v = await this.optionalVector(b + name);
      if (v) w[key] = v;
    }
    if (experts > 0 && (await this.read(`${b}ffn_gate_inp.weight`)))
      w.moe = await this.moe(l, experts, slice);
    else {
      const gate = await this.need(`${b}ffn_gate.weight`);
      // a tensor-parallel shard with no FFN units holds none (its part of the group sum is zeros)
      if (gate.rows > 0)
        w.ffn = {
          gate: uploadGpuWeight(this.gpu, gate),
          up: await this.matrix(`${b}ffn_up.weight`),
          down: await this.matrix(`${b}ffn_down.weight`),
        };
    }
    return w;
  }

  /**
   * Routed experts `slice.held` of model layer l (of `experts`), each cut to `slice.hidden`:
   * each expert's rows read and uploaded as one weight per projection, in the order listed.
   * `between` runs after each expert's upload (a staging load yields to the event loop there).
   */
  async expertWeights(
    l: number,
    experts: number,
    slice: GpuExpertSlice,
    between?: () => Promise<void>,
  ): Promise<GpuFfnWeights[]> {
    const names = ['ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'].map((n) => `blk.${l}.${n}.weight`);
    const h = slice.hidden;
    const list: GpuFfnWeights[] = [];
    if (h && h.end <= h.start) return list;
    try {
      for (const index of slice.held) {
        const [gate, up, down] = await Promise.all(names.map((n) => this.need(n, { index, of: experts })));
        list.push({
          gate: uploadGpuWeight(this.gpu, hiddenRows(gate!, h)),
          up: uploadGpuWeight(this.gpu, hiddenRows(up!, h)),
          down: uploadGpuWeight(this.gpu, hiddenCols(down!, h)),
        });
        await between?.();
      }
    } catch (e) {
      destroyExperts(list);
      throw e;
    }
    return list;
  }

  /**
   * Uploads, beside the routed experts `layers` hold (local layer l is model layer first + l),
   * those of `layerExperts[l]` that a layer lacks, cut to `hidden`; yields to the event loop
   * after each expert.
   */
  async stageExperts(
    layers: readonly GpuLayerWeights[],
    first: number,
    experts: number,
    layerExperts: readonly (readonly number[])[],
    hidden: { start: number; end: number } | undefined,
  ): Promise<GpuStagedExperts> {
    const staged: Map<number, GpuFfnWeights>[] = [];
    const yieldTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    try {
      for (const [l, w] of layers.entries()) {
        const got = new Map<number, GpuFfnWeights>();
        staged.push(got);
        const held = w.moe?.ids;
        const lack = held ? (layerExperts[l] ?? []).filter((e) => !held.includes(e)) : [];
        if (lack.length === 0) continue;
        const slice = { held: lack, ...(hidden ? { hidden } : {}) };
        const list = await this.expertWeights(first + l, experts, slice, yieldTurn);
        lack.forEach((e, i) => got.set(e, list[i]!));
      }
    } catch (e) {
      destroyExperts(staged.flatMap((m) => [...m.values()]));
      throw e;
    }
    return staged;
  }

  /** The MoE FFN of layer l: the 3-D expert tensors cut into one weight per expert held. */
  private async moe(l: number, experts: number, slice?: GpuExpertSlice): Promise<GpuMoeWeights> {
    const b = `blk.${l}.`;
    const held = slice?.held ?? Array.from({ length: experts }, (_, e) => e);
    const list = await this.expertWeights(l, experts, slice ? { ...slice, held } : { held });
    const moe: GpuMoeWeights = {
      router: await this.matrix(`${b}ffn_gate_inp.weight`),
      experts: list,
      ids: list.length > 0 ? [...held] : [],
    };
    const sharedGate = await this.read(`${b}ffn_gate_shexp.weight`);
    if (sharedGate) {
      moe.shared = { gateInp: await this.vector(`${b}ffn_gate_inp_shexp.weight`) };
      if (sharedGate.rows > 0)
        moe.shared.ffn = {
          gate: uploadGpuWeight(this.gpu, { ...sharedGate, name: `${b}ffn_gate_shexp.weight` }),
          up: await this.matrix(`${b}ffn_up_shexp.weight`),
          down: await this.matrix(`${b}ffn_down_shexp.weight`),
        };
    }
    return moe;
  }
}

/** Rows [h.start, h.end) of an expert's gate or up weight (all of them without h). */
function hiddenRows(w: WeightSource, h: { start: number; end: number } | undefined): WeightSource {
  if (!h) return w;
  const bytes = rowBytes(w.type, w.cols);
  return { ...w, rows: h.end - h.start, data: w.data.subarray(h.start * bytes, h.end * bytes) };
}

/** Input columns [h.start, h.end) of an expert's down weight (all of them without h). */
function hiddenCols(w: WeightSource, h: { start: number; end: number } | undefined): WeightSource {
  return h ? { ...w, colStart: h.start, colCount: h.end - h.start } : w;
}

/** Routed experts uploaded beside those held (GpuLlama.stageExperts): by local layer, expert id to weights. */
export type GpuStagedExperts = readonly ReadonlyMap<number, GpuFfnWeights>[];

/**
 * Each MoE layer l of `layers` holds `layerExperts[l]` (ascending) from now on: the experts
 * held and listed stay, the staged ones join. Returns the experts let go (the caller frees
 * them once no recorded pass binds them).
 */
export function switchLayerExperts(
  layers: readonly GpuLayerWeights[],
  layerExperts: readonly (readonly number[])[],
  staged: GpuStagedExperts,
): GpuFfnWeights[] {
  const dropped: GpuFfnWeights[] = [];
  layers.forEach((w, l) => {
    const moe = w.moe;
    if (!moe) return;
    const keep = [...(layerExperts[l] ?? [])].sort((a, b) => a - b);
    const byId = new Map(moe.ids.map((e, i) => [e, moe.experts[i]!]));
    for (const [e, ffn] of byId) if (!keep.includes(e)) dropped.push(ffn);
    const experts = keep.map((e) => {
      const ffn = staged[l]?.get(e) ?? byId.get(e);
      assert.ok(ffn, `expert ${e} of local layer ${l} is neither held nor staged`);
      return ffn;
    });
    w.moe = { ...moe, experts, ids: keep };
  });
  return dropped;
}

export function destroyExperts(experts: readonly GpuFfnWeights[]): void {
  for (const w of experts.flatMap(ffnMatrices)) destroyGpuWeight(w);
}

/** The matrices of an FFN. */
export function ffnMatrices(f: GpuFfnWeights): GpuWeight[] {
  return [f.gate, f.up, f.down];
}

/** The matrices of a layer (for their bytes, and to release them). */
export function layerMatrices(l: GpuLayerWeights): GpuWeight[] {
  const ffn = ffnMatrices;
  return [
    l.q,
    l.k,
    l.v,
    l.o,
    ...(l.ffn ? ffn(l.ffn) : []),
    ...(l.moe
      ? [l.moe.router, ...l.moe.experts.flatMap(ffn), ...(l.moe.shared?.ffn ? ffn(l.moe.shared.ffn) : [])]
      : []),
  ];
}

export function destroyLayer(l: GpuLayerWeights): void {
  for (const b of [
    l.attnNorm,
    l.ffnNorm,
    l.qBias,
    l.kBias,
    l.vBias,
    l.qNorm,
    l.kNorm,
    l.moe?.shared?.gateInp,
  ])
    b?.destroy();
  for (const w of layerMatrices(l)) destroyGpuWeight(w);
}

/** A vector tensor (norm weights, biases) as f32, whatever its stored type. */
export function toF32(w: WeightSource): Float32Array {
  const out = new Float32Array(w.cols * w.rows);
  dequantRow(w.type, w.data, 0, w.cols * w.rows, out);
  return out;
}
