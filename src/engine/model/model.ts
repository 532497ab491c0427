import assert from 'node:assert/strict';
import { ExpertLoad } from './expert-load.js';
import { TandemError } from '../../errors/index.js';
import {
  GEMM_TOKENS,
  type Kernels,
  type KvCache,
  type KvCacheType,
  type RopeParams,
} from '../../kernels/types.js';
import { loadFastReduce } from '../../kernels/reduce-native.js';
import { SequenceCache } from '../kv/kv-cache.js';
import { attentionForward, headLayout, type HeadLayout } from './attention.js';
import { reduceAcross, singleNodeComm, type ShardComm } from './comm.js';
import { configFromMetadata, type ModelConfig } from './config.js';
import { moeFfn, moeFfnDispatched, swigluFfn, type ExpertWork } from './ffn.js';
import type { ModelFile } from './model-file.js';
import { Scratch, addInPlace } from './scratch.js';
import { mixedPrefillChunk, prefillPiece } from './prefill.js';
import {
  expertsInLayer,
  fullShard,
  rangeLength,
  validateShard,
  withLayerExperts,
  type ShardSpec,
} from './shard.js';
import {
  leafParts,
  loadLayerExperts,
  loadShardWeights,
  type FfnWeights,
  type ShardWeights,
} from './weights.js';

export interface LoadOptions {
  /** The part of the model to hold; default the whole model. */
  shard?: ShardSpec;
  /** Communication with the other shards; default single node (no-op). */
  comm?: ShardComm;
  /**
   * The shards of this shard's tensor-parallel group, in rank order (this one among them):
   * the group then adds its row-parallel sums in one node's order (leaves.ts).
   */
  group?: readonly ShardSpec[];
  /** Called after each layer's weights are uploaded (load progress for a large model). */
  onLayer?: (loaded: number, total: number) => void;
}

export interface SessionOptions {
  /** Positions the KV cache holds; default the model's context length. */
  contextLength?: number;
  /** KV cache element type; default f32. */
  kvType?: KvCacheType;
}

/** A placement of experts loaded beside the one in use (Model.stageExperts). */
export interface StagedExperts {
  /** The shard once switched. */
  readonly shard: ShardSpec;
  /** By local layer: the experts loaded for it. */
  readonly loaded: readonly ReadonlyMap<number, FfnWeights>[];
}

/**
 * Tokens per forward chunk during prefill: bounds activation memory for long prompts. A
 * tensor-parallel group sums each chunk's partial outputs at once, so a shard on another
 * backend (the GPU shard) cuts a prompt where this one does.
 */
export const FORWARD_CHUNK = 256;

/** Rows per batched decode forward: below GEMM_TOKENS, so each row gets matvec's bits (a lone token's). */
export const DECODE_BATCH = GEMM_TOKENS - 1;

/**
 * A loaded model (or shard of one) on one kernels backend. The forward pass is split into
 * `embed`, `forwardLayers` and `logits` so a pipeline stage can run only its part; `forward`
 * runs all three for a whole-model shard.
 */
export class Model {
  private readonly scratch = new Scratch();
  private readonly layout: HeadLayout;
  private readonly rope: RopeParams;
  /** The most pieces a row-parallel projection of this shard hands its group (leafParts). */
  private readonly parts: number;
  /** Tokens routed to each expert of this shard's MoE layers (undefined for a dense model). */
  readonly expertLoad: ExpertLoad | undefined;
  /** CPU time spent in this shard's own experts under expert parallel (moeFfnDispatched). */
  readonly expertWork: ExpertWork = { cpuMs: 0 };

  private constructor(
    readonly kernels: Kernels,
    readonly config: ModelConfig,
    private held: ShardSpec,
    private readonly weights: ShardWeights,
    private readonly comm: ShardComm,
    private readonly group: readonly ShardSpec[] | undefined,
  ) {
    this.layout = headLayout(config, held);
    this.expertLoad =
      config.expertCount > 0 ? new ExpertLoad(rangeLength(held.layers), config.expertCount) : undefined;
    this.parts = Math.max(
      1,
      ...weights.layers.flatMap((l) => [leafParts(l.attention.o), ...(l.ffn ? [leafParts(l.ffn.down)] : [])]),
    );
    this.rope = {
      headDim: config.headDim,
      style: config.ropeStyle,
      freqBase: config.ropeFreqBase,
      freqScale: config.ropeFreqScale,
      ...(weights.ropeFreqFactors ? { freqFactors: weights.ropeFreqFactors } : {}),
    };
  }

  /** Reads the config, validates the shard and uploads its weights. */
  static async load(file: ModelFile, kernels: Kernels, options: LoadOptions = {}): Promise<Model> {
    const config = configFromMetadata(
      (key) => file.meta(key),
      new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
    );
    const shard = options.shard ?? fullShard(config);
    validateShard(config, shard);
    const weights = await loadShardWeights(file, kernels, config, shard, options.group, options.onLayer);
    // the leaf sums and residual adds in C (same bits as the TypeScript loop; else it runs)
    await loadFastReduce();
    return new Model(kernels, config, shard, weights, options.comm ?? singleNodeComm, options.group);
  }

  /** Prompt tokens per forwardMixed piece that fill the kernels' GEMM lane groups (mixedPrefillChunk). */
  get mixedChunk(): number {
    return mixedPrefillChunk(this.kernels.gemmGroup);
  }

  /** The part of the model held now (its experts change with switchExperts). */
  get shard(): ShardSpec {
    return this.held;
  }

  /**
   * Loads, beside the experts this shard holds, those of `layerExperts` (one list per model
   * layer) that it lacks: a new placement of experts, staged while forwards go on (it yields
   * to the event loop after each expert). Nothing a forward uses changes until switchExperts.
   */
  async stageExperts(file: ModelFile, layerExperts: readonly (readonly number[])[]): Promise<StagedExperts> {
    const next = withLayerExperts(this.config, this.held, layerExperts);
    const loaded: Map<number, FfnWeights>[] = [];
    for (let l = 0; l < this.weights.layers.length; l++) {
      const layer = this.held.layers.start + l;
      const have = this.weights.layers[l]!.moe?.experts;
      const lack = expertsInLayer(next, layer).filter((e) => !have?.has(e));
      const got = new Map<number, FfnWeights>();
      for (const e of lack) {
        const one = await loadLayerExperts(file, this.kernels, this.config, next, this.group, layer, [e]);
        for (const [id, w] of one) got.set(id, w);
        await new Promise((resolve) => setImmediate(resolve));
      }
      loaded.push(got);
    }
    return { shard: next, loaded };
  }

  /**
   * Holds the staged placement from the next forward on (call it between forwards); returns
   * the weights of the experts let go, which no forward uses any more.
   */
  switchExperts(staged: StagedExperts): FfnWeights[] {
    const dropped: FfnWeights[] = [];
    this.weights.layers.forEach((w, l) => {
      if (!w.moe) return;
      const keep = new Set(expertsInLayer(staged.shard, this.held.layers.start + l));
      const experts = new Map<number, FfnWeights>();
      for (const [e, ffn] of w.moe.experts) {
        if (keep.has(e)) experts.set(e, ffn);
        else dropped.push(ffn);
      }
      for (const [e, ffn] of staged.loaded[l] ?? []) experts.set(e, ffn);
      w.moe.experts = new Map([...experts].sort((a, b) => a[0] - b[0]));
    });
    this.held = staged.shard;
    return dropped;
  }

  /** A new KV cache sized for this shard. */
  newSession(options: SessionOptions = {}): SequenceCache {
    return new SequenceCache(this.kernels, {
      layers: rangeLength(this.shard.layers),
      kvHeads: this.layout.kvStored,
      headDim: this.config.headDim,
      contextLength: Math.min(options.contextLength ?? this.config.contextLength, this.config.contextLength),
      type: options.kvType ?? 'f32',
    });
  }

  /** Hidden states [n, width] for token ids (first pipeline stage). */
  embed(tokens: ArrayLike<number>, out?: Float32Array): Float32Array {
    const width = this.config.embeddingLength;
    const embed = this.weights.embed;
    assert.ok(embed, 'this shard does not hold the token embedding');
    const x = out ?? new Float32Array(tokens.length * width);
    for (let t = 0; t < tokens.length; t++) {
      const id = tokens[t] as number;
      checkToken(id, this.config.vocabSize);
      this.kernels.embedRow(embed, id, x.subarray(t * width, (t + 1) * width));
    }
    return x;
  }

  /**
   * Runs this shard's layers in place over hidden states x [n, width] for positions
   * pos0..pos0+n-1, storing their K/V in `cache` (which must already have reserved them).
   */
  async forwardLayers(x: Float32Array, n: number, pos0: number, cache: SequenceCache): Promise<void> {
    const positions = new Int32Array(n);
    for (let i = 0; i < n; i++) positions[i] = pos0 + i;
    await this.runLayers(x, n, positions, { cache: cache.cache, pos0 });
  }

  /**
   * The layers over x [n, width] at `positions`: the rows of one sequence (`cache` from
   * `pos0` on), then, with `rowCaches`, its length of rows each its own sequence's decode
   * step (see AttentionStep; without `cache`, all rows are).
   */
  private async runLayers(
    x: Float32Array,
    n: number,
    positions: Int32Array,
    kv: { cache: KvCache; pos0: number; rowCaches?: readonly KvCache[] } | { rowCaches: readonly KvCache[] },
  ): Promise<void> {
    const c = this.config;
    const k = this.kernels;
    const width = c.embeddingLength;
    const target =
      'cache' in kv ? kv : { cache: kv.rowCaches[0] as KvCache, pos0: 0, rowCaches: kv.rowCaches };
    const lone = target.rowCaches?.length ?? 0;
    const xn = this.scratch.f32('xn', n * width);
    const m = n * width;
    // a row-parallel projection hands the group up to `parts` pieces of [n, width]
    const out = this.scratch.f32('out', this.parts * m);
    this.comm.beginForward?.();
    for (let l = 0; l < this.weights.layers.length; l++) {
      const w = this.weights.layers[l]!;
      k.rmsNorm(x, w.attention.norm, c.rmsEps, xn, n);
      if (this.layout.heads > 0) {
        attentionForward(k, c, this.layout, w.attention, this.rope, this.scratch, {
          x: xn,
          n,
          positions,
          layer: l,
          out,
          ...target,
        });
      } else out.fill(0);
      await reduceAcross(this.comm, out, m, w.attention.o);
      addInPlace(x, out);
      k.rmsNorm(x, w.ffnNorm, c.rmsEps, xn, n);
      const experts = this.comm.experts;
      // the MoE layers sum across the group themselves (each expert's output, then the shared expert's)
      const onRoute = (ids: Int32Array): void => this.expertLoad?.record(l, ids);
      if (w.moe && experts)
        await moeFfnDispatched(
          k,
          c,
          w.moe,
          this.scratch,
          xn,
          out.subarray(0, m),
          n,
          experts,
          this.comm,
          onRoute,
          this.held.layers.start + l,
          this.expertWork,
        );
      else if (w.moe) await moeFfn(k, c, w.moe, this.scratch, xn, out.subarray(0, m), n, this.comm, onRoute);
      else {
        if (w.ffn) swigluFfn(k, w.ffn, this.scratch, xn, out, n, 'ffn', lone);
        else out.fill(0);
        await reduceAcross(this.comm, out, m, w.ffn?.down);
      }
      addInPlace(x, out);
    }
  }

  /** Logits [vocab] of one hidden state [width] (last pipeline stage). */
  async logits(hidden: Float32Array, out?: Float32Array): Promise<Float32Array> {
    const { outputNorm, output } = this.weights;
    assert.ok(outputNorm && output, 'this shard does not hold the output head');
    const xn = this.scratch.f32('head.xn', this.config.embeddingLength);
    this.kernels.rmsNorm(hidden, outputNorm, this.config.rmsEps, xn, 1);
    const full = out ?? new Float32Array(this.config.vocabSize);
    const local =
      rangeLength(this.shard.vocab) === this.config.vocabSize
        ? full
        : this.scratch.f32('head.local', rangeLength(this.shard.vocab));
    this.kernels.matvec(output, xn, local);
    const p = this.comm.allGatherLogits(local, full);
    if (p) await p;
    return full;
  }

  /**
   * One decode step of several sequences: tokens[t] runs at the next position of caches[t].
   * The projections and FFNs run over the rows together (one matmul of n rows instead of n
   * matvecs); attention runs per row against its own cache. Returns each row's logits.
   * Batch-invariant: a row's logits are bit for bit those of `forward([token], cache)`, since
   * the rows go through the kernels in batches below GEMM_TOKENS, where a matmul gives each
   * token matvec's bits (kernels/types.ts).
   */
  async forwardBatch(tokens: readonly number[], caches: readonly SequenceCache[]): Promise<Float32Array[]> {
    assert.equal(tokens.length, caches.length, 'forwardBatch takes one cache per token');
    assert.equal(new Set(caches).size, caches.length, 'forwardBatch takes one token per sequence');
    for (const cache of caches) cache.reserve(1);
    const out: Float32Array[] = [];
    const width = this.config.embeddingLength;
    for (let s = 0; s < tokens.length; s += DECODE_BATCH) {
      const rows = caches.slice(s, s + DECODE_BATCH);
      const n = rows.length;
      const x = this.embed(tokens.slice(s, s + n), this.scratch.f32('x', n * width));
      await this.forwardLayersBatch(x, rows);
      out.push(...(await this.logitsRows(x, n)));
    }
    return out;
  }

  /**
   * forwardBatch's layers alone (a pipeline stage's part of a decode step): x [n, width] holds
   * one row per cache (n = caches.length), run in place through this shard's layers at each
   * cache's next position; row t bit for bit `forwardLayers` of it alone.
   */
  async forwardLayersBatch(x: Float32Array, caches: readonly SequenceCache[]): Promise<void> {
    assert.equal(new Set(caches).size, caches.length, 'forwardLayersBatch takes one row per sequence');
    const width = this.config.embeddingLength;
    for (const cache of caches) cache.reserve(1);
    for (let s = 0; s < caches.length; s += DECODE_BATCH) {
      const rows = caches.slice(s, s + DECODE_BATCH);
      await this.runLayers(
        x.subarray(s * width, (s + rows.length) * width),
        rows.length,
        Int32Array.from(rows, (cache) => cache.length),
        { rowCaches: rows.map((cache) => cache.cache) },
      );
      for (const cache of rows) cache.advance(1);
    }
  }

  /**
   * The logits of each of n hidden states [n, width], row t bit for bit `logits(row t)`: the
   * output head runs once for all rows where the kernels offer matvecRows.
   */
  async logitsRows(hidden: Float32Array, n: number): Promise<Float32Array[]> {
    const width = this.config.embeddingLength;
    const matvecRows = this.kernels.matvecRows?.bind(this.kernels);
    const out: Float32Array[] = [];
    if (n === 1 || !matvecRows) {
      for (let t = 0; t < n; t++) out.push(await this.logits(hidden.subarray(t * width, (t + 1) * width)));
      return out;
    }
    const { outputNorm, output } = this.weights;
    assert.ok(outputNorm && output, 'this shard does not hold the output head');
    const xn = this.scratch.f32('head.xn', n * width);
    this.kernels.rmsNorm(hidden, outputNorm, this.config.rmsEps, xn, n);
    const vocab = rangeLength(this.shard.vocab);
    const local = this.scratch.f32('head.rows', n * vocab);
    matvecRows(output, xn, local, n);
    for (let t = 0; t < n; t++) {
      const row = local.subarray(t * vocab, (t + 1) * vocab);
      const full = vocab === this.config.vocabSize ? row.slice() : new Float32Array(this.config.vocabSize);
      const p = this.comm.allGatherLogits(vocab === this.config.vocabSize ? full : row, full);
      if (p) await p;
      out.push(full);
    }
    return out;
  }

  /**
   * A prefill piece of one sequence and one decode step of others in one forward: the decode
   * rows ride along the prefill's pass over the weights (kernels' matmulPlusRows) instead of
   * a pass of their own. Returns what `forward(prefill.tokens, prefill.cache)` and
   * `forwardBatch(decode.tokens, decode.caches)` would, bit for bit: the prefill tokens get
   * their matmul's bits, each decode row matvec's. Models with experts run the two apart.
   */
  async forwardMixed(
    prefill: { tokens: readonly number[]; cache: SequenceCache },
    decode: { tokens: readonly number[]; caches: readonly SequenceCache[] },
  ): Promise<{ prefill: Float32Array; decode: Float32Array[] }> {
    const p = prefill.tokens.length;
    const d = decode.tokens.length;
    assert.equal(d, decode.caches.length, 'forwardMixed takes one cache per decode token');
    assert.ok(!decode.caches.includes(prefill.cache), 'forwardMixed takes each sequence once');
    if (!this.mixesInOnePass(p, d)) {
      const first = p > 0 ? await this.forward(prefill.tokens, prefill.cache) : new Float32Array(0);
      return { prefill: first, decode: d > 0 ? await this.forwardBatch(decode.tokens, decode.caches) : [] };
    }
    const width = this.config.embeddingLength;
    const x = this.embed([...prefill.tokens, ...decode.tokens], this.scratch.f32('x', (p + d) * width));
    await this.forwardLayersMixed(x, p, prefill.cache, decode.caches);
    // the logits of the prefill's last token and of each decode row, each a lone matvec's
    const [first, ...rest] = await this.logitsRows(x.subarray((p - 1) * width), d + 1);
    return { prefill: first as Float32Array, decode: rest };
  }

  /**
   * forwardMixed's layers alone (a pipeline stage's part of a mixed step): x [p + d, width]
   * holds p rows of the prefill cache's next positions, then one row per decode cache at its
   * next position, run in place through this shard's layers; the first p rows bit for bit
   * `forwardLayers` of them, the others `forwardLayersBatch`'s. One pass over the weights where
   * forwardMixed would take one, else the two apart.
   */
  async forwardLayersMixed(
    x: Float32Array,
    p: number,
    prefill: SequenceCache,
    decode: readonly SequenceCache[],
  ): Promise<void> {
    const d = decode.length;
    assert.ok(!decode.includes(prefill), 'forwardLayersMixed takes each sequence once');
    const width = this.config.embeddingLength;
    if (!this.mixesInOnePass(p, d)) {
      if (p > 0) {
        const pos0 = prefill.reserve(p);
        await this.forwardLayers(x.subarray(0, p * width), p, pos0, prefill);
        prefill.advance(p);
      }
      if (d > 0) await this.forwardLayersBatch(x.subarray(p * width, (p + d) * width), decode);
      return;
    }
    assert.equal(new Set(decode).size, d, 'forwardLayersMixed takes one row per sequence');
    prefill.reserve(p);
    for (const cache of decode) cache.reserve(1);
    const positions = new Int32Array(p + d);
    for (let i = 0; i < p; i++) positions[i] = prefill.length + i;
    for (let t = 0; t < d; t++) positions[p + t] = (decode[t] as SequenceCache).length;
    await this.runLayers(x, p + d, positions, {
      cache: prefill.cache,
      pos0: prefill.length,
      rowCaches: decode.map((cache) => cache.cache),
    });
    prefill.advance(p);
    for (const cache of decode) cache.advance(1);
  }

  /**
   * Whether a piece of p prompt tokens and d decode rows run as one pass: both present, the
   * piece one forward's chunk, no experts, and kernels with matmulPlusRows.
   */
  private mixesInOnePass(p: number, d: number): boolean {
    return (
      d > 0 &&
      p > 0 &&
      prefillPiece(p, FORWARD_CHUNK) === p &&
      !this.weights.layers.some((l) => l.moe) &&
      this.kernels.matmulPlusRows !== undefined
    );
  }

  /**
   * Runs tokens at the cache's next positions through the whole model and returns the
   * logits of the last one. Throws KV_CONTEXT_FULL before computing if they do not fit.
   * Long prompts run in pieces (prefillPiece), which give the bits of any other cut.
   */
  async forward(tokens: ArrayLike<number>, cache: SequenceCache): Promise<Float32Array> {
    const width = this.config.embeddingLength;
    cache.reserve(tokens.length);
    let last: Float32Array | undefined;
    // pieces cut by prefillPiece: a token's bits do not depend on where the prompt is cut
    for (let s = 0; s < tokens.length;) {
      const n = prefillPiece(tokens.length - s, FORWARD_CHUNK);
      const chunk = Array.prototype.slice.call(tokens, s, s + n) as number[];
      const x = this.embed(chunk, this.scratch.f32('x', n * width));
      await this.forwardLayers(x, n, cache.length, cache);
      cache.advance(n);
      last = x.subarray((n - 1) * width, n * width);
      s += n;
    }
    assert.ok(last, 'forward needs at least one token');
    return this.logits(last);
  }
}

function checkToken(id: number, vocab: number): void {
  if (!Number.isInteger(id) || id < 0 || id >= vocab) {
    throw new TandemError('GENERATE_PROMPT', `token id ${id} is outside the vocabulary [0, ${vocab})`, {
      hint: 'pass token ids the model knows (see its tokenizer), or use --prompt with text',
      details: { token: id, vocabSize: vocab },
    });
  }
}
