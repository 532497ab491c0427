/**
 * The one interface every kernel backend implements (TypeScript reference twin, WebAssembly
 * SIMD). It serves a Llama-family forward pass for decode (n = 1) and prefill (n tokens).
 *
 * Conventions:
 * - Activations are plain Float32Arrays owned by the caller, row-major; shapes are written
 *   in comments as `[n, cols]` (n tokens, cols features). Calls are synchronous.
 * - Weights are uploaded once into kernel-owned memory (`uploadWeight`) and referred to by a
 *   `Weight` handle; the fast backend keeps them in WebAssembly memory.
 * - A weight is a matrix [rows, cols] in ggml's layout: ggml's ne[0] is `cols` (the
 *   contiguous, inner dimension), ne[1] is `rows`. A PyTorch `[out, in]` Linear weight is
 *   rows = out, cols = in. `matvec` computes y[r] = sum_c W[r, c] * x[c].
 * - Numerics follow llama.cpp's CPU backend so logits match it: the activation x is first
 *   converted to the weight type's "dot type" (q8_0 blocks for Q8_0/Q4_0, q8_K blocks for
 *   Q4_K/Q5_K/Q6_K, f16 for F16, bf16 for BF16, f32 for F32), then dotted exactly in
 *   integers per block and scaled in float.
 */

/** ggml tensor types the kernels can multiply by (numbers are ggml's `ggml_type` ids). */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q8_0: 8,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  BF16: 30,
} as const;
export type GgmlTypeName = keyof typeof GgmlType;
export type GgmlTypeId = (typeof GgmlType)[GgmlTypeName];

/** Where a weight comes from: raw ggml bytes of `rows` full rows of width `cols`. */
export interface WeightSource {
  /** ggml type id of the data (e.g. `GgmlType.Q8_0`). */
  type: GgmlTypeId;
  /** Rows held in `data`. */
  rows: number;
  /** Full row width (elements) of the rows in `data`; a multiple of the type's block size. */
  cols: number;
  /** ggml-encoded bytes, rows * rowBytes(type, cols) of them, rows one after another. */
  data: Uint8Array;
  /**
   * Optional tensor-parallel slice: keep rows [rowStart, rowStart + rowCount) of `data`
   * (defaults: 0, all) and columns [colStart, colStart + colCount) (defaults: 0, all).
   * Column bounds must be multiples of the type's block size (32, or 256 for K-quants).
   */
  rowStart?: number;
  rowCount?: number;
  colStart?: number;
  colCount?: number;
  /** A name for error messages (e.g. `blk.3.attn_q.weight`). */
  name?: string;
}

/** A weight matrix [rows, cols] held in kernel-owned memory. Opaque outside its backend. */
export interface Weight {
  readonly type: GgmlTypeId;
  readonly rows: number;
  readonly cols: number;
  readonly name: string;
}

/** Rotary position embedding parameters (llama.cpp's `ggml_rope_ext` without YaRN). */
export interface RopeParams {
  /** Elements per head. */
  headDim: number;
  /** Leading elements of each head that rotate (llama.cpp's n_rot); default headDim. */
  ropeDim?: number;
  /** 'normal' rotates adjacent pairs (2i, 2i+1) (llama); 'neox' rotates (i, i + ropeDim/2) (qwen2). */
  style: 'normal' | 'neox';
  /** Frequency base theta (e.g. 10000, 500000). */
  freqBase: number;
  /** Linear position scaling (llama.cpp's freq_scale = 1 / rope scaling factor); default 1. */
  freqScale?: number;
  /**
   * Per-frequency divisors, ropeDim/2 of them (llama.cpp's `rope_freqs` tensor, used by
   * Llama 3 scaling); `llama3FreqFactors` in rope.ts computes them from the GGUF keys.
   */
  freqFactors?: Float32Array;
}

export type KvCacheType = 'f32' | 'f16';

export interface KvCacheOptions {
  layers: number;
  /** Key/value heads (grouped-query attention: fewer than query heads). */
  kvHeads: number;
  headDim: number;
  /** Positions the cache holds (the context length). */
  maxSeq: number;
  type: KvCacheType;
}

/** A KV cache in kernel-owned memory: per layer K and V, each [maxSeq, kvHeads, headDim]. */
export interface KvCache {
  readonly options: Readonly<KvCacheOptions>;
}

export interface AttentionParams {
  layer: number;
  /** Query heads; a multiple of the cache's kvHeads (heads / kvHeads q heads share a kv head). */
  heads: number;
  /** Position of the first query token; token i sits at pos0 + i and sees positions 0..pos0+i. */
  pos0: number;
  /** Query tokens. */
  n: number;
  /** Score scale; default 1 / sqrt(headDim). */
  scale?: number;
}

/** attentionRows' parameters: one query row per cache, at its own position. */
export interface AttentionRowsParams {
  layer: number;
  /** Query heads; a multiple of the caches' kvHeads. */
  heads: number;
  /** Row t's position in caches[t]: it sees positions 0..positions[t]. */
  positions: Int32Array;
  /** Score scale; default 1 / sqrt(headDim). */
  scale?: number;
}

/**
 * 'reference': plain TypeScript; 'wasm': WebAssembly SIMD; 'native': the wasm backend with its
 * hottest kernels replaced by C compiled on this machine (needs a C compiler).
 */
export type KernelsBackend = 'reference' | 'wasm' | 'native';

export interface Kernels {
  readonly backend: KernelsBackend;
  /** Compute threads, the calling thread included. */
  readonly threads: number;
  /**
   * Optional: tokens per lane group of the prepared GEMMs (16 on x86 AVX-512 VNNI, 15 on NEON;
   * undefined where the GEMM has no groups). A GEMM of a multiple of it fills every group,
   * while one token more costs a whole group; numerics do not depend on it.
   */
  readonly gemmGroup?: number | undefined;

  /** Copies (and may repack) a weight into kernel-owned memory. */
  uploadWeight(source: WeightSource): Weight;
  /**
   * Optional: gives a weight's memory back for later uploads; no call may use the weight
   * afterwards. Without it a weight's memory stays until `close` (the reference twin's goes
   * with the weight's last reference).
   */
  releaseWeight?(w: Weight): void;

  /** y = W x. x: [cols], y: [rows]. */
  matvec(w: Weight, x: Float32Array, y: Float32Array): void;
  /** y = x W^T for n tokens. x: [n, cols], y: [n, rows]. */
  matmul(w: Weight, x: Float32Array, y: Float32Array, n: number): void;
  /**
   * Optional: n one-token products in one pass over the weight. x: [n, cols], y: [n, rows];
   * row t of y is bit for bit `matvec(w, x[t])` at any n (matmul promises that only below
   * GEMM_TOKENS). A backend without it leaves the caller to call matvec per token.
   */
  matvecRows?(w: Weight, x: Float32Array, y: Float32Array, n: number): void;
  /** Dequantises one row of an embedding table exactly. out: [cols]. */
  embedRow(w: Weight, row: number, out: Float32Array): void;

  /** out = x / sqrt(mean(x^2) + eps) * weight per token. x, out: [n, dim], weight: [dim]; out may be x. */
  rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, n: number): void;
  /** Rotates x in place. x: [n, heads, headDim]; positions: [n]. */
  rope(x: Float32Array, positions: Int32Array, heads: number, params: RopeParams): void;
  /** Softmax in place over each row. x: [n, len]. */
  softmax(x: Float32Array, n: number, len: number): void;
  /** out = silu(gate) * up elementwise; out may alias gate. All [len]. */
  swiglu(gate: Float32Array, up: Float32Array, out: Float32Array): void;
  /**
   * Optional fused SwiGLU projection: w stacks the gate rows over the up rows ([2 * half,
   * cols]); out[t] = silu(gate x_t) * (up x_t). x: [n, cols], out: [n, half]. Saves moving
   * the [n, 2 * half] projection out of the kernels' memory and back. With `rows`, x holds
   * n + rows tokens and out n + rows rows, split as in matmulPlusRows.
   */
  matmulSwiglu?(w: Weight, x: Float32Array, out: Float32Array, n: number, rows?: number): void;
  /**
   * Optional: a matmul of n tokens and `rows` one-token products in one call (where the
   * kernels can, one pass over the weight). x: [n + rows, cols], y: [n + rows, rows of w]; rows
   * 0..n-1 of y are bit for bit `matmul(w, x[0..n), n)`, row n + t bit for bit
   * `matvec(w, x[n + t])`: other sequences' decode steps riding along one sequence's prefill.
   */
  matmulPlusRows?(w: Weight, x: Float32Array, y: Float32Array, n: number, rows: number): void;

  createKvCache(options: KvCacheOptions): KvCache;
  /** Stores k, v for n tokens at positions pos0..pos0+n-1 of `layer`. k, v: [n, kvHeads, headDim]. */
  kvStore(cache: KvCache, layer: number, pos0: number, k: Float32Array, v: Float32Array, n: number): void;
  /**
   * Causal grouped-query attention over the cache (which must already hold positions up to
   * pos0 + n - 1). q: [n, heads, headDim], out: [n, heads, headDim].
   */
  attention(cache: KvCache, q: Float32Array, out: Float32Array, params: AttentionParams): void;
  /**
   * Optional: one decode row of each of several sequences in one call. Row t of q
   * [caches.length, heads, headDim] attends to caches[t] over positions 0..positions[t]
   * (already stored), into row t of out; each row bit for bit
   * `attention(caches[t], row t, { n: 1, pos0: positions[t] })`. Where the caches live apart
   * (different kernel memories) the kernels may run the rows one by one.
   */
  attentionRows?(
    caches: readonly KvCache[],
    q: Float32Array,
    out: Float32Array,
    params: AttentionRowsParams,
  ): void;

  /** Releases workers and memory; the instance is unusable afterwards. */
  close(): Promise<void>;
}

export interface KernelsOptions {
  backend?: KernelsBackend;
  /** Compute threads including the caller's; default os.availableParallelism(). */
  threads?: number;
  /**
   * Wasm backend: bytes of weights and caches per WebAssembly memory before another memory
   * is started (default 3 GiB; a wasm32 memory holds at most 4 GiB). Small values test spanning.
   */
  arenaBytes?: number;
  /**
   * Wasm/native backends: jobs below this many multiply-adds run on the calling thread alone
   * (default 65536). Tests pass 0 to exercise the workers on small shapes.
   */
  smallJob?: number;
}

/**
 * Tokens from which a matmul may take a batched (GEMM) kernel: Q8_0 and the K-quants on the
 * native VNNI kernels (mm_q8t, mm_kt). Below it every backend's matmul gives each token, bit
 * for bit, the outputs of `matvec` on that token alone (a token's sums run in matvec's order
 * whatever the batch), which the batched decode step's invariance rests on. From it on a
 * token's outputs can differ from matvec's in the last bits (the GEMM's sums run in another
 * order), while the GEMM gives a token the same bits in any batch of GEMM_TOKENS or more.
 * Code that cuts a batch into pieces and wants the whole batch's results (the pipeline's
 * prefill micro-batches) keeps every piece at or above this size, or does not cut.
 */
export const GEMM_TOKENS = 12;
