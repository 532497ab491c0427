import assert from 'node:assert/strict';
import { TandemError } from '../errors/index.js';
import { SequenceCache } from '../engine/kv/kv-cache.js';
import type { ShardComm } from '../engine/model/comm.js';
import { configFromMetadata, type ModelConfig } from '../engine/model/config.js';
import type { ModelFile } from '../engine/model/model-file.js';
import { DECODE_BATCH, FORWARD_CHUNK } from '../engine/model/model.js';
import { prefillPiece } from '../engine/model/prefill.js';
import {
  expertsInLayer,
  kvHeadsFor,
  rangeLength,
  withLayerExperts,
  type ShardSpec,
} from '../engine/model/shard.js';
import { ExpertLoad } from '../engine/model/expert-load.js';
import { dispatchRouted } from '../engine/model/ffn.js';
import { GEMM_TOKENS } from '../kernels/types.js';
import {
  GPU_CHUNK,
  GpuKvCache,
  GpuLlama,
  type GpuDevice,
  type GpuExpertExchange,
  type GpuStagedExperts,
} from '../kernels/webgpu/index.js';
import {
  gpuLlamaSpec,
  gpuShardRefusal,
  layerSums,
  ropeFreqFactors,
  shardReader,
  type LayerSums,
} from './gpu-shard-slices.js';
import type { ShardModel } from './shard-model.js';

/** A placement of experts uploaded beside those a GPU shard holds (GpuShardModel.stageExperts). */
export interface GpuStaged {
  /** The shard once switched. */
  readonly shard: ShardSpec;
  readonly experts: GpuStagedExperts;
  /** Experts uploaded. */
  readonly loaded: number;
}

export interface GpuShardOptions {
  file: ModelFile;
  device: GpuDevice;
  shard: ShardSpec;
  /** The shards of its tensor-parallel group, in rank order (this one among them). */
  group: readonly ShardSpec[];
  tpRank: number;
  comm: ShardComm;
  /** The longest context a session asks for (sizes the refusal's KV check; default the model's). */
  contextLength?: number;
}

/**
 * Rows per pass of a shard whose group sums across ranks: the longest prefill piece the CPU
 * shard runs in one pass (prefillPiece of FORWARD_CHUNK: up to FORWARD_CHUNK + GEMM_TOKENS - 1
 * tokens), so both backends sum the same rows in each all-reduce.
 */
export const GPU_SHARD_CHUNK = FORWARD_CHUNK + GEMM_TOKENS;

function shardConfig(file: ModelFile): ModelConfig {
  return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
}

/** Rows per recorded pass of a shard in a group of `size` ranks. */
export function gpuShardChunk(size: number): number {
  return size > 1 ? GPU_SHARD_CHUNK : GPU_CHUNK;
}

/**
 * Why the shard of plan rank `tpRank` (group `group`) cannot run on a GPU with these limits,
 * or undefined: `--kernels auto` on a node falls back to the CPU on it, `webgpu` refuses.
 */
export function refuseGpuShard(
  file: ModelFile,
  shard: ShardSpec,
  group: readonly ShardSpec[],
  tpRank: number,
  device: Pick<GpuDevice, 'limits'>,
  contextLength?: number,
): string | undefined {
  const c = shardConfig(file);
  const ctx = Math.min(contextLength ?? c.contextLength, c.contextLength);
  const chunk = gpuShardChunk(group.length);
  return gpuShardRefusal(file, c, shard, { group, tpRank, chunk, contextLength: ctx }, device.limits);
}

/**
 * A rank's shard on the GPU (ShardModel's WebGPU implementation): GpuLlama holding the shard's
 * layer range and its slices of heads, FFN units and output head. Tensor parallel: each layer
 * half's partial output [n, width] is read back, summed by the ShardComm (the same call a CPU
 * rank makes, so GPU and CPU ranks share a group) and written back; nothing else is read back
 * but the logits. Pipeline: the hidden states at the stage boundary are uploaded and read
 * back (forwardLayers). Mixtures of experts: under tensor parallel each expert's hidden units
 * are cut and the slot outputs summed as the CPU's moeFfn sums them; under expert parallel
 * the GPU routes, reads back its share of the rows and their choices, and the exchange is the
 * CPU shard's own (expertExchange); a new placement of experts is uploaded beside the held
 * ones and switched to between passes (stageExperts, switchExperts: RankExperts drives both
 * backends alike). Prompts are cut as Model cuts them (prefillPiece of
 * FORWARD_CHUNK, decode batches of DECODE_BATCH rows), the group's sums then agree in length
 * and order.
 */
export class GpuShardModel implements ShardModel {
  private constructor(
    readonly config: ModelConfig,
    private held: ShardSpec,
    readonly llama: GpuLlama,
    private readonly comm: ShardComm,
    /** Expert parallel: the choices of this rank's tokens, counted from the routing it reads back. */
    readonly expertLoad: ExpertLoad | undefined,
  ) {}

  /** Checks the shard against the device's limits (KERNELS_DEVICE_LIMIT), then uploads its slices. */
  static async load(o: GpuShardOptions): Promise<GpuShardModel> {
    const c = shardConfig(o.file);
    const s = o.shard;
    const refusal = refuseGpuShard(o.file, s, o.group, o.tpRank, o.device, o.contextLength);
    if (refusal !== undefined)
      throw new TandemError('KERNELS_DEVICE_LIMIT', `--kernels webgpu: this rank's shard: ${refusal}`, {
        hint: 'use --kernels native/wasm (or auto, which falls back) on this node, or another split',
      });
    const sums = layerSums(o.file, c, s, o.group);
    const kv = kvHeadsFor(c, s.heads);
    const comm = o.comm;
    const reduce = async (partial: Float32Array, layer: number, half: keyof LayerSums): Promise<void> => {
      const group = sums[layer]![half];
      const pieces = group?.counts[o.tpRank] ?? 1;
      // The GPU multiplies its columns as one part (its own f32 order, not the leaf tree); where
      // the group adds a rank's columns in several pieces (3 ranks), the part goes as the first
      // piece and zeros as the others: the group's tree adds the same terms, exact zeros nothing.
      const x = pieces > 1 ? new Float32Array(pieces * partial.length) : partial;
      if (x !== partial) x.set(partial);
      const p = group ? comm.allReduceSum(x, group) : comm.allReduceSum(x);
      if (p) await p;
      if (x !== partial) partial.set(x.subarray(0, partial.length));
    };
    const whole = gpuLlamaSpec(c, await ropeFreqFactors(o.file, c));
    const moe = whole.moe && {
      ...whole.moe,
      expertFfn: rangeLength(s.expertFfn),
      sharedFfn: rangeLength(s.sharedFfn),
    };
    const expertLoad = comm.experts ? new ExpertLoad(rangeLength(s.layers), c.expertCount) : undefined;
    const experts = comm.experts && expertExchange(c, comm, s.layers.start, expertLoad);
    const llama = await GpuLlama.load(
      o.device,
      {
        ...whole,
        ...(moe ? { moe } : {}),
        layers: rangeLength(s.layers),
        heads: rangeLength(s.heads),
        kvHeads: rangeLength(kv),
        ffn: rangeLength(s.ffn),
        shard: {
          firstLayer: s.layers.start,
          embed: s.embed,
          head: s.head,
          vocabRows: s.head ? rangeLength(s.vocab) : 0,
          chunk: gpuShardChunk(o.group.length),
          kvGroup: c.headCount / c.headCountKv,
          headOffset: s.heads.start - kv.start * (c.headCount / c.headCountKv),
          ...(o.group.length > 1 ? { reduce } : {}),
          ...(moe
            ? { expertSlice: (layer: number) => ({ held: expertsInLayer(s, layer), hidden: s.expertFfn }) }
            : {}),
          ...(experts ? { experts } : {}),
        },
      },
      shardReader(o.file, c, s),
    );
    return new GpuShardModel(c, s, llama, comm, expertLoad);
  }

  /** The part of the model held now (its experts change with switchExperts). */
  get shard(): ShardSpec {
    return this.held;
  }

  /**
   * Uploads, beside the experts this shard holds, those of `layerExperts` (one list per model
   * layer) that it lacks: a new placement of experts, staged while passes go on. Nothing a
   * pass uses changes until switchExperts. The next shard is the engine Model's
   * (withLayerExperts).
   */
  async stageExperts(file: ModelFile, layerExperts: readonly (readonly number[])[]): Promise<GpuStaged> {
    const next = withLayerExperts(this.config, this.held, layerExperts);
    const local = Array.from({ length: rangeLength(next.layers) }, (_, l) =>
      expertsInLayer(next, next.layers.start + l),
    );
    const experts = await this.llama.stageExperts(
      shardReader(file, this.config, next),
      local,
      next.expertFfn,
    );
    return { shard: next, experts, loaded: experts.reduce((a, m) => a + m.size, 0) };
  }

  /** Holds the staged placement from the next pass on (call it between passes); returns the experts freed. */
  switchExperts(staged: GpuStaged): number {
    const s = staged.shard;
    const local = Array.from({ length: rangeLength(s.layers) }, (_, l) =>
      expertsInLayer(s, s.layers.start + l),
    );
    const dropped = this.llama.switchExperts(local, staged.experts);
    this.held = s;
    return dropped;
  }

  /** Frees a staged placement never switched to. */
  dropStaged(staged: GpuStaged): void {
    this.llama.dropStaged(staged.experts);
  }

  newSession(options: { contextLength?: number } = {}): SequenceCache {
    const spec = this.llama.spec;
    return new SequenceCache(this.llama, {
      layers: spec.layers,
      kvHeads: spec.kvHeads,
      headDim: spec.headDim,
      contextLength: Math.min(options.contextLength ?? this.config.contextLength, this.config.contextLength),
      type: 'f32',
    });
  }

  embed(tokens: ArrayLike<number>, out?: Float32Array): Float32Array {
    const x = this.llama.embedRows(Array.from(tokens));
    if (!out) return x;
    out.set(x);
    return out;
  }

  async forwardLayers(x: Float32Array, n: number, pos0: number, cache: SequenceCache): Promise<void> {
    this.comm.beginForward?.();
    await this.llama.layersAt(x.subarray(0, n * this.config.embeddingLength), n, pos0, gpuKv(cache));
  }

  async forwardLayersBatch(x: Float32Array, caches: readonly SequenceCache[]): Promise<void> {
    assert.equal(new Set(caches).size, caches.length, 'forwardLayersBatch takes one row per sequence');
    const width = this.config.embeddingLength;
    for (const cache of caches) cache.reserve(1);
    for (let s = 0; s < caches.length; s += DECODE_BATCH) {
      const rows = caches.slice(s, s + DECODE_BATCH);
      this.comm.beginForward?.();
      await this.llama.layersRows(
        x.subarray(s * width, (s + rows.length) * width),
        rows.map((cache) => ({ cache: gpuKv(cache), pos: cache.length })),
      );
      for (const cache of rows) cache.advance(1);
    }
  }

  async logits(hidden: Float32Array, out?: Float32Array): Promise<Float32Array> {
    const [local] = await this.llama.logitsOfHidden(hidden, 1);
    return this.gather(local as Float32Array, out);
  }

  async logitsRows(hidden: Float32Array, n: number): Promise<Float32Array[]> {
    const width = this.config.embeddingLength;
    const out: Float32Array[] = [];
    for (let s = 0; s < n; s += this.llama.chunk) {
      const m = Math.min(this.llama.chunk, n - s);
      for (const local of await this.llama.logitsOfHidden(hidden.subarray(s * width), m))
        out.push(await this.gather(local));
    }
    return out;
  }

  async forward(tokens: ArrayLike<number>, cache: SequenceCache): Promise<Float32Array> {
    assert.ok(tokens.length > 0, 'forward needs at least one token');
    cache.reserve(tokens.length);
    const ids = Array.from(tokens);
    for (let s = 0; ;) {
      const n = prefillPiece(ids.length - s, FORWARD_CHUNK);
      const piece = ids.slice(s, s + n);
      s += n;
      this.comm.beginForward?.();
      if (s < ids.length) await this.llama.pass(piece, cache);
      else return this.gather(await this.llama.forward(piece, cache));
    }
  }

  async forwardBatch(tokens: readonly number[], caches: readonly SequenceCache[]): Promise<Float32Array[]> {
    assert.equal(tokens.length, caches.length, 'forwardBatch takes one cache per token');
    for (const cache of caches) cache.reserve(1);
    const out: Float32Array[] = [];
    for (let s = 0; s < tokens.length; s += DECODE_BATCH) {
      this.comm.beginForward?.();
      const rows = await this.llama.forwardBatch(
        tokens.slice(s, s + DECODE_BATCH),
        caches.slice(s, s + DECODE_BATCH),
      );
      for (const local of rows) out.push(await this.gather(local));
    }
    return out;
  }

  /** The full logits from this rank's vocabulary rows (every rank's, gathered by the group). */
  private async gather(local: Float32Array, out?: Float32Array): Promise<Float32Array> {
    const vocab = this.config.vocabSize;
    const full = out ?? new Float32Array(vocab);
    const whole = local.length === vocab;
    if (whole) full.set(local);
    const p = this.comm.allGatherLogits(whole ? full : local, full);
    if (p) await p;
    return full;
  }

  destroy(): void {
    this.llama.destroy();
  }
}

/**
 * Expert parallel from a GPU shard: the GPU routes and reads back the batch's rows and its
 * share's choices, and the exchange and combine are the CPU shard's own (dispatchRouted over
 * the group's ExpertDispatch), so GPU and CPU ranks share one expert-parallel group.
 */
function expertExchange(
  c: ModelConfig,
  comm: ShardComm,
  firstLayer: number,
  load: ExpertLoad | undefined,
): GpuExpertExchange | undefined {
  const dispatch = comm.experts;
  if (!dispatch) return undefined;
  const width = c.embeddingLength;
  return {
    share: (n) => dispatch.share(n),
    exchange: async (layer, n, share, run) => {
      load?.record(layer - firstLayer, share.ids);
      const out = new Float32Array(n * width);
      const { routing, ...routed } = share;
      await dispatchRouted(dispatch, {
        ...routed,
        ...(dispatch.routesLocally?.(n) === true ? { routing } : {}),
        n,
        used: c.expertUsedCount,
        width,
        layer,
        out,
        run,
      });
      return out;
    },
  };
}

function gpuKv(cache: SequenceCache): GpuKvCache {
  assert.ok(cache.cache instanceof GpuKvCache, 'a GPU shard runs on the sessions it created');
  return cache.cache;
}
