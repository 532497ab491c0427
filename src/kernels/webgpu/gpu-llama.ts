import assert from 'node:assert/strict';
import { TandemError } from '../../errors/index.js';
import { rowBytes } from '../ggml-blocks.js';
import { ropeAngles } from '../ref/ops-ref.js';
import { dequantRow } from '../ref/quant-ref.js';
import type { KvCacheOptions, WeightSource } from '../types.js';
import type { GpuDevice } from './gpu-device.js';
import {
  GpuLayerLoader,
  destroyExperts,
  destroyLayer,
  layerMatrices,
  switchLayerExperts,
  type GpuLayerWeights,
  type GpuStagedExperts,
  type GpuMoeWeights,
  type GpuTensorReader,
} from './gpu-layer-weights.js';
import { GpuKvCache, type GpuSequence } from './gpu-kv-cache.js';
import type { GpuLlamaSpec } from './gpu-llama-spec.js';
import { GpuMoe } from './gpu-moe.js';
import { GpuOps } from './gpu-ops.js';
import { destroyGpuWeight, uploadGpuWeight, type GpuWeight } from './gpu-weights.js';

/** Where a forward's rows go: one sequence's chunk from pos0, or each row its own sequence's decode step. */
type RowsKv = { cache: GpuKvCache; pos0: number } | { rows: readonly { cache: GpuKvCache; pos: number }[] };

/** Tokens per recorded chunk of a prefill: bounds the activation and attention-score buffers. */
export const GPU_CHUNK = 64;

/**
 * A llama-family model held on the GPU: weights uploaded once, the KV cache on the GPU, and
 * a forward pass that records every layer of a chunk of tokens into one compute pass (one
 * submission) and reads back only logits. The embedding rows are dequantised on the host
 * (one row per token) and written in; RoPE's angles are computed on the host by the
 * reference's ropeAngles, so the GPU only rotates. A prefill chunk's matmuls run tiled; a
 * batched decode step's rows run per row, each as it would alone (batch-invariant).
 *
 * A shard (spec.shard) holds a layer range, a slice of the heads and FFN units and of the
 * output head; with a group `reduce` each pass reads back the row-parallel partial outputs
 * [n, width] once per layer half, has them summed and writes the sums back, and nothing else.
 * Hidden states cross a pipeline stage's boundary through `layersAt` / `layersRows` (uploaded,
 * read back after the last layer) and `logitsOfHidden`.
 */
export class GpuLlama {
  private readonly ops: GpuOps;
  private readonly buf: Record<string, GPUBuffer> = {};
  private readonly moe: GpuMoe | undefined;
  private scores: GPUBuffer | undefined;
  private scoresFloats = 0;
  /** Rows per recorded pass. */
  readonly chunk: number;

  private constructor(
    readonly gpu: GpuDevice,
    readonly spec: GpuLlamaSpec,
    private readonly embed: WeightSource | undefined,
    private readonly layers: readonly GpuLayerWeights[],
    private readonly outputNorm: GPUBuffer | undefined,
    private readonly output: GpuWeight | undefined,
  ) {
    this.ops = new GpuOps(gpu);
    const s = spec;
    const CHUNK = (this.chunk = s.shard?.chunk ?? GPU_CHUNK);
    const sizes: Record<string, number> = {
      x: s.width,
      xn: s.width,
      q: s.heads * s.headDim,
      k: s.kvHeads * s.headDim,
      v: s.kvHeads * s.headDim,
      qn: s.heads * s.headDim,
      kn: s.kvHeads * s.headDim,
      att: s.heads * s.headDim,
      tmp: s.width,
      gate: s.ffn,
      up: s.ffn,
      h: s.ffn,
      cs: (s.rope.ropeDim ?? s.headDim) + 1,
      lastN: s.width,
      logits: s.shard?.vocabRows ?? s.vocabSize,
    };
    for (const [name, floats] of Object.entries(sizes))
      this.buf[name] = gpu.storage(4 * CHUNK * Math.max(1, floats), name);
    this.moe = s.moe ? new GpuMoe(gpu, this.ops, { ...s.moe, width: s.width }, CHUNK) : undefined;
  }

  /** Uploads the weights named as in GGUF (`blk.N.attn_q.weight`, ...); `onLayer` after each layer. */
  static async load(
    gpu: GpuDevice,
    spec: GpuLlamaSpec,
    read: GpuTensorReader,
    onLayer?: (loaded: number, total: number) => void,
  ): Promise<GpuLlama> {
    const shard = spec.shard;
    const loader = new GpuLayerLoader(gpu, read);
    const embed = (shard?.embed ?? true) ? await loader.need('token_embd.weight') : undefined;
    const layers: GpuLayerWeights[] = [];
    try {
      for (let l = 0; l < spec.layers; l++) {
        const layer = (shard?.firstLayer ?? 0) + l;
        layers.push(await loader.layer(layer, spec.moe?.experts ?? 0, shard?.expertSlice?.(layer)));
        onLayer?.(l + 1, spec.layers);
      }
      let outputNorm: GPUBuffer | undefined;
      let output: GpuWeight | undefined;
      if (shard?.head ?? true) {
        outputNorm = await loader.vector('output_norm.weight');
        const outSource = (await read('output.weight')) ?? embed;
        assert.ok(outSource, 'a shard that holds the head reads output.weight');
        output = uploadGpuWeight(gpu, { ...outSource, name: 'output.weight' });
      }
      const model = new GpuLlama(gpu, spec, embed, layers, outputNorm, output);
      const weights = [...layers.flatMap(layerMatrices), ...(output ? [output] : [])];
      await gpu.precompile(
        model.ops.kernels(
          weights.map((w) => w.type),
          spec.moe !== undefined,
        ),
      );
      return model;
    } catch (e) {
      for (const l of layers) destroyLayer(l);
      throw e;
    }
  }

  /**
   * Uploads, beside the routed experts held, those of `layerExperts[l]` (model expert ids, one
   * list per local layer) that local layer l lacks, cut to the shard's hidden units (`hidden`);
   * passes go on meanwhile. Nothing a pass uses changes until switchExperts.
   */
  async stageExperts(
    read: GpuTensorReader,
    layerExperts: readonly (readonly number[])[],
    hidden?: { start: number; end: number },
  ): Promise<GpuStagedExperts> {
    const loader = new GpuLayerLoader(this.gpu, read);
    const first = this.spec.shard?.firstLayer ?? 0;
    return loader.stageExperts(this.layers, first, this.spec.moe?.experts ?? 0, layerExperts, hidden);
  }

  /**
   * Holds `layerExperts[l]` in local layer l from the next pass on (call it between passes):
   * experts held and listed stay, the staged ones join, the rest are freed. Returns how many
   * experts were freed.
   */
  switchExperts(layerExperts: readonly (readonly number[])[], staged: GpuStagedExperts): number {
    const dropped = switchLayerExperts(this.layers, layerExperts, staged);
    // a pass recorded but not submitted may still bind the dropped weights
    this.gpu.flush();
    destroyExperts(dropped);
    return dropped.length;
  }

  /** Frees experts staged and not switched to. */
  dropStaged(staged: GpuStagedExperts): void {
    destroyExperts(staged.flatMap((layer) => [...layer.values()]));
  }

  /** Bytes of weights on the GPU. */
  get weightBytes(): number {
    const out = this.output ? [this.output] : [];
    return [...out, ...this.layers.flatMap(layerMatrices)].reduce((sum, w) => sum + w.bytes, 0);
  }

  /** A KV cache on the GPU; f32 only (the f16 cache's rounding is the CPU backends'). */
  createKvCache(options: KvCacheOptions): GpuKvCache {
    if (options.type !== 'f32') {
      throw new TandemError(
        'KERNELS_UNSUPPORTED_TYPE',
        `the WebGPU KV cache holds f32, not ${options.type}`,
        {
          hint: 'use --kv-type f32 with --kernels webgpu',
        },
      );
    }
    const floats = options.maxSeq * options.kvHeads * options.headDim;
    const make = (what: string): GPUBuffer[] =>
      Array.from({ length: options.layers }, (_, l) => this.gpu.storage(4 * floats, `kv ${what} ${l}`));
    return new GpuKvCache({ ...options }, make('k'), make('v'));
  }

  /**
   * Runs tokens at the sequence's next positions through the model and returns the logits
   * [vocab] of the last one. Throws (from reserve) before computing when they do not fit.
   */
  async forward(tokens: ArrayLike<number>, seq: GpuSequence): Promise<Float32Array> {
    const n = await this.pass(tokens, seq);
    return (await this.logitsOf(n - 1, 1))[0] as Float32Array;
  }

  /**
   * `forward` without the logits: runs tokens at the sequence's next positions through the
   * layers in chunks of `chunk` rows, leaving the last chunk's hidden states on the GPU; returns
   * that chunk's row count.
   */
  async pass(tokens: ArrayLike<number>, seq: GpuSequence): Promise<number> {
    const cache = gpuCache(seq);
    assert.ok(tokens.length > 0, 'forward needs at least one token');
    seq.reserve(tokens.length);
    let n = 0;
    for (let s = 0; s < tokens.length; s += n) {
      n = Math.min(this.chunk, tokens.length - s);
      const chunk = Array.prototype.slice.call(tokens, s, s + n) as number[];
      this.writeInputs(
        this.embedRows(chunk),
        chunk.map((_, t) => seq.length + t),
      );
      await this.runLayers(n, { cache, pos0: seq.length }, false);
      seq.advance(n);
    }
    return n;
  }

  /**
   * Hidden states x [n, width] (a pipeline stage's input) through the layers at positions
   * pos0.., in place: uploaded, run in chunks of `chunk` rows, read back. The caller reserves
   * the positions and advances the cache afterwards (as Model.forwardLayers).
   */
  async layersAt(x: Float32Array, n: number, pos0: number, cache: GpuKvCache): Promise<void> {
    const width = this.spec.width;
    for (let s = 0; s < n; s += this.chunk) {
      const m = Math.min(this.chunk, n - s);
      const rows = x.subarray(s * width, (s + m) * width);
      this.writeInputs(
        rows,
        Array.from({ length: m }, (_, t) => pos0 + s + t),
      );
      await this.runLayers(m, { cache, pos0: pos0 + s }, false);
      rows.set(await this.gpu.read(this.buf['x']!, 4 * m * width));
    }
  }

  /**
   * A pipeline stage's part of a batched decode step: row t of x [n, width] at position
   * rows[t].pos of its own cache, in place, each row as it would run alone (n <= chunk).
   */
  async layersRows(x: Float32Array, rows: readonly { cache: GpuKvCache; pos: number }[]): Promise<void> {
    assert.ok(rows.length <= this.chunk, 'layersRows takes at most a chunk of rows');
    this.writeInputs(
      x,
      rows.map((r) => r.pos),
    );
    await this.runLayers(rows.length, { rows }, true);
    x.set(await this.gpu.read(this.buf['x']!, 4 * rows.length * this.spec.width));
  }

  /** The output head's logits [vocab rows held] of each of n hidden states [n, width] (n <= chunk). */
  async logitsOfHidden(hidden: Float32Array, n: number): Promise<Float32Array[]> {
    assert.ok(n <= this.chunk, 'logitsOfHidden takes at most a chunk of rows');
    this.gpu.flush();
    this.gpu.write(this.buf['x']!, hidden.subarray(0, n * this.spec.width));
    return this.logitsOf(0, n);
  }

  /**
   * One decode step of several sequences: tokens[t] at the next position of seqs[t]. Each
   * row's logits are bit for bit those of `forward([tokens[t]], seqs[t])`: every kernel of
   * the step computes a row in workgroups of its own with the dispatch a lone token gets
   * (per-row matmuls, per-row attention against the row's cache), whatever the batch.
   */
  async forwardBatch(tokens: readonly number[], seqs: readonly GpuSequence[]): Promise<Float32Array[]> {
    assert.equal(tokens.length, seqs.length, 'forwardBatch takes one sequence per token');
    assert.equal(new Set(seqs).size, seqs.length, 'forwardBatch takes one token per sequence');
    for (const seq of seqs) seq.reserve(1);
    const out: Float32Array[] = [];
    for (let s = 0; s < tokens.length; s += this.chunk) {
      const group = seqs.slice(s, s + this.chunk);
      const rows = group.map((seq) => ({ cache: gpuCache(seq), pos: seq.length }));
      this.writeInputs(
        this.embedRows(tokens.slice(s, s + this.chunk)),
        rows.map((r) => r.pos),
      );
      await this.runLayers(rows.length, { rows }, true);
      for (const seq of group) seq.advance(1);
      out.push(...(await this.logitsOf(0, rows.length)));
    }
    return out;
  }

  /** Records the output head over `count` rows of x from row `first`, per row, and reads their logits back. */
  private async logitsOf(first: number, count: number): Promise<Float32Array[]> {
    const { width } = this.spec;
    const vocabSize = this.spec.shard?.vocabRows ?? this.spec.vocabSize;
    assert.ok(this.output && this.outputNorm, 'this shard does not hold the output head');
    const b = this.buf as Record<string, GPUBuffer>;
    const rows = first === 0 ? b['x']! : b['tmp']!;
    if (first > 0) this.ops.copy(b['x']!, rows, count * width, 0, first * width);
    this.ops.rmsNorm(rows, this.outputNorm, this.spec.rmsEps, b['lastN']!, count, width);
    this.ops.matmul(this.output, b['lastN']!, b['logits']!, count, vocabSize, 0, true);
    const all = await this.gpu.read(b['logits']!, 4 * count * vocabSize);
    return Array.from({ length: count }, (_, t) => all.slice(t * vocabSize, (t + 1) * vocabSize));
  }

  /** The embeddings [n, width] of token ids, dequantised on the host (the shard must hold the embedding). */
  embedRows(tokens: readonly number[]): Float32Array {
    const { width, vocabSize } = this.spec;
    const e = this.embed;
    assert.ok(e, 'this shard does not hold the token embedding');
    const x = new Float32Array(tokens.length * width);
    const bytes = rowBytes(e.type, e.cols);
    tokens.forEach((id, t) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
        throw new TandemError(
          'GENERATE_PROMPT',
          `token id ${id} is outside the vocabulary [0, ${vocabSize})`,
          {
            hint: 'pass token ids the model knows (see its tokenizer), or use --prompt with text',
            details: { token: id, vocabSize },
          },
        );
      dequantRow(e.type, e.data, id * bytes, width, x, t * width);
    });
    return x;
  }

  /** Rows x [n, width] and RoPE's cos/sin [n, half] each at `positions`, written in. */
  private writeInputs(x: Float32Array, positions: readonly number[]): void {
    // queued writes land before anything not yet submitted: submit the previous chunk first
    this.gpu.flush();
    const { rope } = this.spec;
    const half = (rope.ropeDim ?? rope.headDim) / 2;
    const n = positions.length;
    const cs = new Float32Array(2 * n * half);
    for (let t = 0; t < n; t++)
      ropeAngles(
        positions[t] as number,
        rope,
        cs.subarray(t * half, (t + 1) * half),
        cs.subarray((n + t) * half, (n + t + 1) * half),
      );
    this.gpu.write(this.buf['x']!, x);
    this.gpu.write(this.buf['cs']!, cs);
  }

  /**
   * Records every layer over the n rows of x (updated in place); with a group `reduce`, the
   * partial outputs are summed across the group after each layer's attention and FFN.
   */
  private async runLayers(n: number, kv: RowsKv, perRow: boolean): Promise<void> {
    const s = this.spec;
    const b = this.buf as Record<string, GPUBuffer>;
    const ops = this.ops;
    for (let l = 0; l < s.layers; l++) {
      const w = this.layers[l] as GpuLayerWeights;
      ops.rmsNorm(b['x']!, w.attnNorm, s.rmsEps, b['xn']!, n, s.width);
      this.attention(l, w, n, kv, perRow);
      ops.matmul(w.o, b['att']!, b['tmp']!, n, s.width, 0, perRow);
      await this.reduced(n, l, 'attention');
      ops.add(b['x']!, b['tmp']!, n * s.width);
      ops.rmsNorm(b['x']!, w.ffnNorm, s.rmsEps, b['xn']!, n, s.width);
      if (w.moe) await this.moeLayer(l, w.moe, n, perRow);
      else {
        if (w.ffn) {
          ops.matmul(w.ffn.gate, b['xn']!, b['gate']!, n, s.ffn, 0, perRow);
          ops.matmul(w.ffn.up, b['xn']!, b['up']!, n, s.ffn, 0, perRow);
          ops.swiglu(b['gate']!, b['up']!, b['h']!, n * s.ffn);
          ops.matmul(w.ffn.down, b['h']!, b['tmp']!, n, s.width, 0, perRow);
        }
        await this.reduced(n, l, 'ffn', !w.ffn);
      }
      ops.add(b['x']!, b['tmp']!, n * s.width);
    }
  }

  /**
   * Layer l's MoE FFN of xn into tmp, complete on every rank: recorded without a read-back on
   * one node; under expert parallel through the group's exchange; under tensor parallel with
   * the slot outputs summed across the group (GpuMoe).
   */
  private async moeLayer(l: number, w: GpuMoeWeights, n: number, perRow: boolean): Promise<void> {
    const b = this.buf as Record<string, GPUBuffer>;
    const moe = this.moe as GpuMoe;
    const shard = this.spec.shard;
    const reduce = shard?.reduce;
    if (!reduce) return moe.record(w, b['xn']!, b['tmp']!, n, perRow);
    const sum = (partial: Float32Array, half: 'experts' | 'shared'): Promise<void> =>
      reduce(partial, l, half);
    if (!shard.experts) return moe.recordSummed(w, b['xn']!, b['tmp']!, n, perRow, sum);
    const layer = shard.firstLayer + l;
    return moe.recordDispatched(w, b['xn']!, b['tmp']!, { n, perRow, layer, group: shard.experts, sum });
  }

  /**
   * The group sum of the partial output in tmp [n, width]: its one read-back and write per
   * layer half. `none`: the shard holds none of the half's units (its part is zeros, not read).
   */
  private async reduced(n: number, layer: number, half: 'attention' | 'ffn', none = false): Promise<void> {
    const reduce = this.spec.shard?.reduce;
    assert.ok(reduce || !none, 'a shard with no FFN units is part of a tensor-parallel group');
    if (!reduce) return;
    const tmp = this.buf['tmp']!;
    const partial = none
      ? new Float32Array(n * this.spec.width)
      : await this.gpu.read(tmp, 4 * n * this.spec.width);
    await reduce(partial, layer, half);
    // a read submitted everything recorded (and nothing else was recorded since, when none was
    // read: flushed here), so this write lands before the add reads tmp
    this.gpu.flush();
    this.gpu.write(tmp, partial);
  }

  /** Layer l's attention over the n rows of xn into att: q/k/v (biases, q/k norms), RoPE, cache store, GQA. */
  private attention(l: number, w: GpuLayerWeights, n: number, kv: RowsKv, perRow: boolean): void {
    const s = this.spec;
    const b = this.buf as Record<string, GPUBuffer>;
    const ops = this.ops;
    const qw = s.heads * s.headDim;
    const kvWidth = s.kvHeads * s.headDim;
    const half = (s.rope.ropeDim ?? s.headDim) / 2;
    const neox = s.rope.style === 'neox';
    ops.matmul(w.q, b['xn']!, b['q']!, n, qw, 0, perRow);
    ops.matmul(w.k, b['xn']!, b['k']!, n, kvWidth, 0, perRow);
    ops.matmul(w.v, b['xn']!, b['v']!, n, kvWidth, 0, perRow);
    if (w.qBias) ops.addBias(b['q']!, w.qBias, n, qw);
    if (w.kBias) ops.addBias(b['k']!, w.kBias, n, kvWidth);
    if (w.vBias) ops.addBias(b['v']!, w.vBias, n, kvWidth);
    // qwen3: RMSNorm over each head, [n, heads, hd] as [n * heads, hd] rows
    const q = w.qNorm ? b['qn']! : b['q']!;
    const k = w.kNorm ? b['kn']! : b['k']!;
    if (w.qNorm) ops.rmsNorm(b['q']!, w.qNorm, s.rmsEps, q, n * s.heads, s.headDim);
    if (w.kNorm) ops.rmsNorm(b['k']!, w.kNorm, s.rmsEps, k, n * s.kvHeads, s.headDim);
    ops.rope(q, b['cs']!, n, s.heads, s.headDim, half, neox);
    ops.rope(k, b['cs']!, n, s.kvHeads, s.headDim, half, neox);
    const scale = Math.fround(1 / Math.fround(Math.sqrt(s.headDim)));
    const shape = {
      heads: s.heads,
      kvHeads: s.kvHeads,
      headDim: s.headDim,
      scale,
      group: s.shard?.kvGroup ?? s.heads / s.kvHeads,
      headOffset: s.shard?.headOffset ?? 0,
    };
    if ('cache' in kv) {
      const { cache, pos0 } = kv;
      ops.copy(k, cache.k[l]!, n * kvWidth, pos0 * kvWidth);
      ops.copy(b['v']!, cache.v[l]!, n * kvWidth, pos0 * kvWidth);
      const stride = pos0 + n;
      const scores = this.scoresFor(n * s.heads * stride);
      ops.attention(q, cache.k[l]!, cache.v[l]!, scores, b['att']!, { ...shape, pos0, n, stride });
      return;
    }
    const stride = Math.max(...kv.rows.map((r) => r.pos)) + 1;
    const scores = this.scoresFor(n * s.heads * stride);
    kv.rows.forEach(({ cache, pos }, t) => {
      ops.copy(k, cache.k[l]!, kvWidth, pos * kvWidth, t * kvWidth);
      ops.copy(b['v']!, cache.v[l]!, kvWidth, pos * kvWidth, t * kvWidth);
      ops.attention(q, cache.k[l]!, cache.v[l]!, scores, b['att']!, {
        ...shape,
        pos0: pos,
        n: 1,
        stride,
        t0: t,
      });
    });
  }

  /** The attention scores scratch, grown to hold `floats` (never shrunk while recording). */
  private scoresFor(floats: number): GPUBuffer {
    if (!this.scores || this.scoresFloats < floats) {
      // the old buffer may still be bound in the recorded pass: submit it before replacing
      this.gpu.flush();
      this.scores?.destroy();
      this.scoresFloats = Math.max(floats, 2 * this.scoresFloats);
      this.scores = this.gpu.storage(4 * this.scoresFloats, 'attention scores');
    }
    return this.scores;
  }

  destroy(): void {
    this.ops.destroy();
    this.moe?.destroy();
    this.scores?.destroy();
    for (const b of Object.values(this.buf)) b.destroy();
    for (const l of this.layers) destroyLayer(l);
    this.outputNorm?.destroy();
    if (this.output) destroyGpuWeight(this.output);
  }
}

function gpuCache(seq: GpuSequence): GpuKvCache {
  const cache = seq.cache;
  assert.ok(cache instanceof GpuKvCache, 'forward takes a sequence whose cache this model created');
  return cache;
}
