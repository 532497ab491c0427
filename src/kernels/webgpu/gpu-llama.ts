import assert from 'node:assert/strict';
import { TandemError } from '../../errors/index.js';
import { rowBytes } from '../ggml-blocks.js';
import { ropeAngles } from '../ref/ops-ref.js';
import { dequantRow } from '../ref/quant-ref.js';
import type { KvCache, KvCacheOptions, RopeParams, WeightSource } from '../types.js';
import type { GpuDevice } from './gpu-device.js';
import { GpuOps } from './gpu-ops.js';
import { destroyGpuWeight, uploadGpuWeight, type GpuWeight } from './gpu-weights.js';

/** The hyperparameters of a llama-architecture model the GPU forward pass needs. */
export interface GpuLlamaSpec {
  vocabSize: number;
  /** Width of the residual stream. */
  width: number;
  layers: number;
  /** Hidden width of the FFN. */
  ffn: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  rmsEps: number;
  rope: RopeParams;
}

/** A tensor by its GGUF name as raw ggml rows; undefined when the model has none of that name. */
export type GpuTensorReader = (name: string) => Promise<WeightSource | undefined>;

/** What `forward` needs of a sequence's state (the engine's SequenceCache has it). */
export interface GpuSequence {
  readonly cache: KvCache;
  readonly length: number;
  /** Checks that n more positions fit the context; throws before anything is computed. */
  reserve(n: number): number;
  advance(n: number): void;
}

/** A sequence's KV cache on the GPU: per layer K and V [maxSeq, kvHeads, headDim] f32. */
export class GpuKvCache implements KvCache {
  constructor(
    readonly options: Readonly<KvCacheOptions>,
    readonly k: readonly GPUBuffer[],
    readonly v: readonly GPUBuffer[],
  ) {}
}

interface LayerWeights {
  attnNorm: GPUBuffer;
  q: GpuWeight;
  k: GpuWeight;
  v: GpuWeight;
  o: GpuWeight;
  ffnNorm: GPUBuffer;
  gate: GpuWeight;
  up: GpuWeight;
  down: GpuWeight;
}

/** Tokens per recorded chunk of a prefill: bounds the activation and attention-score buffers. */
export const GPU_CHUNK = 64;
const CHUNK = GPU_CHUNK;

/**
 * A llama-architecture model held on the GPU: weights uploaded once, the KV cache on the
 * GPU, and a forward pass that records every layer of a chunk of tokens into one compute pass
 * (one submission) and reads back only the logits of the last token. The embedding rows are
 * dequantised on the host (one row per token) and written in; RoPE's angles are computed on
 * the host by the reference's ropeAngles, so the GPU only rotates.
 */
export class GpuLlama {
  private readonly ops: GpuOps;
  private readonly buf: Record<string, GPUBuffer> = {};
  private scores: GPUBuffer | undefined;
  private scoresFloats = 0;

  private constructor(
    readonly gpu: GpuDevice,
    readonly spec: GpuLlamaSpec,
    private readonly embed: WeightSource,
    private readonly layers: readonly LayerWeights[],
    private readonly outputNorm: GPUBuffer,
    private readonly output: GpuWeight,
  ) {
    this.ops = new GpuOps(gpu);
    const s = spec;
    const sizes: Record<string, number> = {
      x: s.width,
      xn: s.width,
      q: s.heads * s.headDim,
      k: s.kvHeads * s.headDim,
      v: s.kvHeads * s.headDim,
      att: s.heads * s.headDim,
      tmp: s.width,
      gate: s.ffn,
      up: s.ffn,
      h: s.ffn,
      cs: (s.rope.ropeDim ?? s.headDim) + 1,
    };
    for (const [name, floats] of Object.entries(sizes))
      this.buf[name] = gpu.storage(4 * CHUNK * floats, name);
    this.buf['last'] = gpu.storage(4 * s.width, 'last');
    this.buf['lastN'] = gpu.storage(4 * s.width, 'lastN');
    this.buf['logits'] = gpu.storage(4 * s.vocabSize, 'logits');
  }

  /** Uploads the weights named as in GGUF (`blk.N.attn_q.weight`, ...); `onLayer` after each layer. */
  static async load(
    gpu: GpuDevice,
    spec: GpuLlamaSpec,
    read: GpuTensorReader,
    onLayer?: (loaded: number, total: number) => void,
  ): Promise<GpuLlama> {
    const need = async (name: string): Promise<WeightSource> => {
      const w = await read(name);
      if (!w)
        throw new TandemError('KERNELS_BAD_SHAPE', `the model has no tensor '${name}'`, {
          hint: 'the WebGPU forward pass runs llama-architecture GGUF files; check the file',
        });
      return { ...w, name };
    };
    const vector = async (name: string): Promise<GPUBuffer> => gpu.upload(toF32(await need(name)), name);
    const matrix = async (name: string): Promise<GpuWeight> => uploadGpuWeight(gpu, await need(name));
    const embed = await need('token_embd.weight');
    const layers: LayerWeights[] = [];
    for (let l = 0; l < spec.layers; l++) {
      const b = `blk.${l}.`;
      layers.push({
        attnNorm: await vector(`${b}attn_norm.weight`),
        q: await matrix(`${b}attn_q.weight`),
        k: await matrix(`${b}attn_k.weight`),
        v: await matrix(`${b}attn_v.weight`),
        o: await matrix(`${b}attn_output.weight`),
        ffnNorm: await vector(`${b}ffn_norm.weight`),
        gate: await matrix(`${b}ffn_gate.weight`),
        up: await matrix(`${b}ffn_up.weight`),
        down: await matrix(`${b}ffn_down.weight`),
      });
      onLayer?.(l + 1, spec.layers);
    }
    const outputNorm = await vector('output_norm.weight');
    const outSource = (await read('output.weight')) ?? embed;
    const output = uploadGpuWeight(gpu, { ...outSource, name: 'output.weight' });
    return new GpuLlama(gpu, spec, embed, layers, outputNorm, output);
  }

  /** Bytes of weights on the GPU. */
  get weightBytes(): number {
    return [this.output, ...this.layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down])].reduce(
      (sum, w) => sum + w.bytes,
      0,
    );
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
    const cache = seq.cache;
    assert.ok(cache instanceof GpuKvCache, 'forward takes a sequence whose cache this model created');
    assert.ok(tokens.length > 0, 'forward needs at least one token');
    seq.reserve(tokens.length);
    const width = this.spec.width;
    let n = 0;
    for (let s = 0; s < tokens.length; s += n) {
      n = Math.min(CHUNK, tokens.length - s);
      this.writeInputs(Array.prototype.slice.call(tokens, s, s + n) as number[], seq.length);
      for (let l = 0; l < this.spec.layers; l++) this.layer(l, n, seq.length, cache);
      seq.advance(n);
    }
    const b = this.buf as Record<string, GPUBuffer>;
    const ops = this.ops;
    ops.copy(b['x']!, b['last']!, width, 0, (n - 1) * width);
    ops.rmsNorm(b['last']!, this.outputNorm, this.spec.rmsEps, b['lastN']!, 1, width);
    ops.matmul(this.output, b['lastN']!, b['logits']!, 1);
    return this.gpu.read(b['logits']!, 4 * this.spec.vocabSize);
  }

  /** The chunk's embedding rows [n, width] and RoPE's cos/sin [n, half] each, written in. */
  private writeInputs(tokens: readonly number[], pos0: number): void {
    // queued writes land before anything not yet submitted: submit the previous chunk first
    this.gpu.flush();
    const { width, vocabSize, rope } = this.spec;
    const e = this.embed;
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
    const half = (rope.ropeDim ?? rope.headDim) / 2;
    const n = tokens.length;
    const cs = new Float32Array(2 * n * half);
    for (let t = 0; t < n; t++)
      ropeAngles(
        pos0 + t,
        rope,
        cs.subarray(t * half, (t + 1) * half),
        cs.subarray((n + t) * half, (n + t + 1) * half),
      );
    this.gpu.write(this.buf['x']!, x);
    this.gpu.write(this.buf['cs']!, cs);
  }

  /** Records layer l over the chunk's n tokens at positions pos0.. (x updated in place). */
  private layer(l: number, n: number, pos0: number, cache: GpuKvCache): void {
    const s = this.spec;
    const w = this.layers[l] as LayerWeights;
    const b = this.buf as Record<string, GPUBuffer>;
    const ops = this.ops;
    const kvWidth = s.kvHeads * s.headDim;
    const half = (s.rope.ropeDim ?? s.headDim) / 2;
    const neox = s.rope.style === 'neox';
    ops.rmsNorm(b['x']!, w.attnNorm, s.rmsEps, b['xn']!, n, s.width);
    ops.matmul(w.q, b['xn']!, b['q']!, n);
    ops.matmul(w.k, b['xn']!, b['k']!, n);
    ops.matmul(w.v, b['xn']!, b['v']!, n);
    ops.rope(b['q']!, b['cs']!, n, s.heads, s.headDim, half, neox);
    ops.rope(b['k']!, b['cs']!, n, s.kvHeads, s.headDim, half, neox);
    ops.copy(b['k']!, cache.k[l]!, n * kvWidth, pos0 * kvWidth);
    ops.copy(b['v']!, cache.v[l]!, n * kvWidth, pos0 * kvWidth);
    const scale = Math.fround(1 / Math.fround(Math.sqrt(s.headDim)));
    const stride = pos0 + n;
    ops.attention(b['q']!, cache.k[l]!, cache.v[l]!, this.scoresFor(n * s.heads * stride), b['att']!, {
      heads: s.heads,
      kvHeads: s.kvHeads,
      headDim: s.headDim,
      pos0,
      n,
      stride,
      scale,
    });
    ops.matmul(w.o, b['att']!, b['tmp']!, n);
    ops.add(b['x']!, b['tmp']!, n * s.width);
    ops.rmsNorm(b['x']!, w.ffnNorm, s.rmsEps, b['xn']!, n, s.width);
    ops.matmul(w.gate, b['xn']!, b['gate']!, n);
    ops.matmul(w.up, b['xn']!, b['up']!, n);
    ops.swiglu(b['gate']!, b['up']!, b['h']!, n * s.ffn);
    ops.matmul(w.down, b['h']!, b['tmp']!, n);
    ops.add(b['x']!, b['tmp']!, n * s.width);
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
    this.scores?.destroy();
    for (const b of Object.values(this.buf)) b.destroy();
    for (const l of this.layers) {
      l.attnNorm.destroy();
      l.ffnNorm.destroy();
      for (const w of [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]) destroyGpuWeight(w);
    }
    this.outputNorm.destroy();
    destroyGpuWeight(this.output);
  }
}

/** A vector tensor (norm weights) as f32, whatever its stored type. */
function toF32(w: WeightSource): Float32Array {
  const out = new Float32Array(w.cols * w.rows);
  dequantRow(w.type, w.data, 0, w.cols * w.rows, out);
  return out;
}
