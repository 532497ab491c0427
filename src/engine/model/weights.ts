import { TandemError } from '../../errors/index.js';
import { f16Table } from '../../kernels/dtype.js';
import { ggmlTypeInfo } from '../../kernels/quant/types.js';
import type { GgmlTypeId, Kernels, Weight } from '../../kernels/types.js';
import type { ModelConfig } from './config.js';
import { treeSpares, type SumTree } from '../../kernels/reduce-native.js';
import {
  EXACT_GROUP_SIZES,
  groupSum,
  leafPlan,
  shardLeaves,
  type GroupSum,
  type ShardLeaves,
} from './leaves.js';
import { matrixShape, missingTensor, rowBytes, type ModelFile } from './model-file.js';
import { expertsInLayer, kvHeadsFor, rangeLength, type Range, type ShardSpec } from './shard.js';
import { tensorSplit } from './tp-split.js';

/**
 * Projections that read the same input may be uploaded as one weight (rows stacked), so one
 * kernel call (one thread hand-off, one copy of the input) computes them all; `parts` gives
 * the row count of each, in order. Used when their types agree (not, e.g., in Q4_K_M files
 * where v and down use Q6_K).
 */
export interface Projection {
  fused?: { weight: Weight; parts: readonly number[] };
  /** The separate weights, when not fused. */
  separate?: readonly Weight[];
}

/**
 * A row-parallel projection (attn_output, ffn_down) as its leaves: column slices multiplied
 * separately and summed in the fixed tree (leaves.ts). One leaf is the plain matrix.
 */
export interface Leaves {
  /** This shard's leaves, in column order. */
  weights: readonly Weight[];
  /** The subtrees over `weights` this shard adds up and sends, in column order. */
  pieces: readonly SumTree[];
  /** How the tensor-parallel group adds every rank's pieces (absent: one part per rank, added in the flat tree). */
  group?: GroupSum;
  /** What projectLeaves sums, fixed at load (see leafSums). */
  sums: LeafSums;
}

/**
 * The trees projectLeaves sums into this shard's parts (its pieces with a group sum, else one
 * tree over all of them), the leaf each starts from (multiplied straight into the part), the
 * spare buffers they need, and the input columns.
 */
export interface LeafSums {
  roots: readonly SumTree[];
  first: readonly number[];
  spares: number;
  cols: number;
}

function leafSums(
  weights: readonly Weight[],
  pieces: readonly SumTree[],
  group: GroupSum | undefined,
): LeafSums {
  const roots = group || pieces.length === 1 ? pieces : [pieces];
  const leftmost = (node: SumTree): number => (typeof node === 'number' ? node : leftmost(node[0]!));
  return {
    roots,
    first: roots.map(leftmost),
    spares: Math.max(0, ...roots.map(treeSpares)),
    cols: weights.reduce((c, w) => c + w.cols, 0),
  };
}

/** The parts a shard hands to the group's all-reduce for `leaves`: its pieces, or one sum of them. */
export function leafParts(leaves: Leaves): number {
  return leaves.sums.roots.length;
}

/** Where the tensor-parallel splits cut a row-parallel projection's input columns. */
export interface ColumnCuts {
  /** The cuts of each group size in EXACT_GROUP_SIZES, in that order. */
  sets: number[][];
  /** The column ranges of the shard's tensor-parallel group, in rank order (absent: unknown). */
  group?: Range[];
}

export interface AttentionWeights {
  norm: Float32Array;
  /**
   * q, k, v: rows of q are this shard's query heads, of k and v the KV heads those use;
   * cols are the model width.
   */
  qkv: Projection;
  /** Rows: the model width; cols: this shard's query heads (partial sums across the group). */
  o: Leaves;
  qBias?: Float32Array;
  kBias?: Float32Array;
  vBias?: Float32Array;
  /** Per-head RMSNorm weights [headDim] (qwen3). */
  qNorm?: Float32Array;
  kNorm?: Float32Array;
}

/** A SwiGLU FFN slice: gate/up rows and down cols are this shard's hidden units. */
export interface FfnWeights {
  /** gate then up. */
  gateUp: Projection;
  down: Leaves;
  /** Hidden units of this slice. */
  hidden: number;
}

export interface MoeWeights {
  /** Router [expertCount, width], held whole by every shard. */
  router: Weight;
  /** The routed experts this shard holds, by expert id. */
  experts: ReadonlyMap<number, FfnWeights>;
  /** qwen2moe's shared expert and its sigmoid gate [width]. */
  shared?: FfnWeights & { gate_inp: Float32Array };
}

export interface LayerWeights {
  attention: AttentionWeights;
  ffnNorm: Float32Array;
  ffn?: FfnWeights;
  moe?: MoeWeights;
}

export interface ShardWeights {
  /** Token embedding table [vocab, width] (on the shard that embeds). */
  embed?: Weight;
  outputNorm?: Float32Array;
  /** Output head rows for this shard's vocabulary slice. */
  output?: Weight;
  ropeFreqFactors?: Float32Array;
  /** By local layer index (0 = shard.layers.start). */
  layers: LayerWeights[];
}

/** Uploads a shard's slices of a model file into kernel memory, reading only those rows. */
export class WeightLoader {
  private scratch = new Uint8Array(0);

  constructor(
    private readonly file: ModelFile,
    private readonly kernels: Kernels,
  ) {}

  private entry(name: string) {
    const entry = this.file.tensors.get(name);
    if (!entry) throw missingTensor(name);
    return entry;
  }

  private async read(name: string, start: number, count: number): Promise<Uint8Array> {
    const entry = this.entry(name);
    const need = count * rowBytes(entry.type, matrixShape(entry).cols);
    if (this.scratch.byteLength < need) this.scratch = new Uint8Array(need);
    return this.file.readRows(name, start, count, this.scratch);
  }

  /**
   * Uploads rows `rows` (default all) of a matrix, optionally keeping only columns `cols`;
   * `base` offsets the rows (an expert's block inside a 3-D tensor) and `total` is the
   * row count of that block for validation.
   */
  async matrix(
    name: string,
    expect: { rows: number; cols: number },
    slice: { rows?: Range; cols?: Range; base?: number } = {},
  ): Promise<Weight> {
    const entry = this.entry(name);
    const shape = matrixShape(entry);
    const base = slice.base ?? 0;
    if (shape.cols !== expect.cols || shape.rows < base + expect.rows) {
      throw shapeError(name, entry.dims, expect);
    }
    const rows = slice.rows ?? { start: 0, end: expect.rows };
    const data = await this.read(name, base + rows.start, rangeLength(rows));
    return this.kernels.uploadWeight({
      type: entry.type as GgmlTypeId,
      rows: rangeLength(rows),
      cols: shape.cols,
      data,
      ...(slice.cols ? { colStart: slice.cols.start, colCount: rangeLength(slice.cols) } : {}),
      name,
    });
  }

  /**
   * A row-parallel projection (rows [0, rows) of `rows` x `cols`, offset by `base` rows)
   * restricted to the input columns `cols` of this shard, as its leaves: edges at the `cuts`
   * that hold whole blocks of the tensor's type and whole `unit`s of columns (heads).
   */
  async leaves(
    name: string,
    expect: { rows: number; cols: number },
    cols: Range,
    unit: number,
    cuts: ColumnCuts,
    base = 0,
  ): Promise<Leaves> {
    const { mine, group } = leafLayout(this.entry(name).type, expect.cols, cols, unit, cuts);
    const weights: Weight[] = [];
    for (const range of mine.ranges) weights.push(await this.matrix(name, expect, { cols: range, base }));
    return {
      weights,
      pieces: mine.pieces,
      ...(group ? { group } : {}),
      sums: leafSums(weights, mine.pieces, group),
    };
  }

  /**
   * Several matrices with the same type and width as one weight, rows stacked in order
   * (fused when possible, else uploaded one by one).
   */
  async stacked(
    parts: { name: string; expect: { rows: number; cols: number }; rows: Range; base?: number }[],
  ): Promise<Projection> {
    const entries = parts.map((p) => this.entry(p.name));
    const type = entries[0]!.type;
    if (!entries.every((e) => e.type === type)) {
      // One after another: every read lands in the one scratch buffer.
      const separate: Weight[] = [];
      for (const p of parts)
        separate.push(
          await this.matrix(p.name, p.expect, {
            rows: p.rows,
            ...(p.base !== undefined ? { base: p.base } : {}),
          }),
        );
      return { separate };
    }
    const cols = parts[0]!.expect.cols;
    // Every part's shape is checked before the buffer is sized from the metadata's row counts:
    // a bad hyperparameter (feed_forward_length 2^31-1) must give MODEL_TENSOR, not a RangeError.
    for (const [i, p] of parts.entries()) {
      const shape = matrixShape(entries[i]!);
      if (shape.cols !== cols || p.expect.cols !== cols || shape.rows < (p.base ?? 0) + p.expect.rows)
        throw shapeError(p.name, entries[i]!.dims, p.expect);
    }
    const stride = rowBytes(type, cols);
    const total = parts.reduce((n, p) => n + rangeLength(p.rows), 0);
    if (this.scratch.byteLength < total * stride) this.scratch = new Uint8Array(total * stride);
    const data = this.scratch.subarray(0, total * stride);
    let at = 0;
    for (const p of parts) {
      const base = p.base ?? 0;
      const count = rangeLength(p.rows);
      const bytes = await this.file.readRows(p.name, base + p.rows.start, count, data.subarray(at * stride));
      if (bytes.byteOffset !== data.byteOffset + at * stride) data.set(bytes, at * stride);
      at += count;
    }
    const weight = this.kernels.uploadWeight({
      type: type as GgmlTypeId,
      rows: total,
      cols,
      data,
      name: parts.map((p) => p.name).join('+'),
    });
    return { fused: { weight, parts: parts.map((p) => rangeLength(p.rows)) } };
  }

  /** A vector (norm weight, bias) as f32, elements [range.start, range.end). */
  async vector(
    name: string,
    length: number,
    range: Range = { start: 0, end: length },
  ): Promise<Float32Array> {
    const entry = this.entry(name);
    const shape = matrixShape(entry);
    if (shape.cols * shape.rows !== length) throw shapeError(name, entry.dims, { rows: 1, cols: length });
    const bytes = await this.read(name, 0, shape.rows);
    const out = new Float32Array(rangeLength(range));
    if (entry.type === 0) {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat32((range.start + i) * 4, true);
    } else if (entry.type === 1) {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (let i = 0; i < out.length; i++)
        out[i] = f16Table[view.getUint16((range.start + i) * 2, true)] as number;
    } else {
      throw new TandemError(
        'MODEL_TENSOR',
        `tensor '${name}' has ggml type ${entry.type}; vectors must be F32 or F16`,
        {
          hint: 'norm weights and biases stay unquantised in GGUF files; re-export the model',
          details: { name, type: entry.type },
        },
      );
    }
    return out;
  }

  has(name: string): boolean {
    return this.file.tensors.has(name);
  }
}

/**
 * The leaves of a row-parallel projection of ggml type `type` with `cols` input columns that a
 * shard holding columns `range` multiplies (edges on `cuts` holding whole blocks and whole
 * `unit`s of columns), the pieces it sends, and how its group adds them (undefined: one part
 * per rank, the flat tree). Every backend's shard takes its cut from here.
 */
export function leafLayout(
  type: number,
  cols: number,
  range: Range,
  unit: number,
  cuts: ColumnCuts,
): { mine: ShardLeaves; group: GroupSum | undefined } {
  const block = ggmlTypeInfo(type)?.blockSize ?? 1;
  const plan = leafPlan(cols, cuts.sets, lcm(block, unit));
  return { mine: shardLeaves(plan, range), group: cuts.group && groupSum(plan, cuts.group) };
}

function lcm(a: number, b: number): number {
  let [x, y] = [a, b];
  while (y !== 0) [x, y] = [y, x % y];
  return (a / x) * b;
}

function shapeError(
  name: string,
  dims: readonly number[],
  expect: { rows: number; cols: number },
): TandemError {
  return new TandemError(
    'MODEL_TENSOR',
    `tensor '${name}' has dims [${dims.join(', ')}], expected ${expect.cols} columns and ${expect.rows} rows`,
    {
      hint: 'the tensor does not match the hyperparameters in the metadata; re-export the model',
      details: { name, dims: [...dims], expected: expect },
    },
  );
}

async function loadAttention(
  l: WeightLoader,
  c: ModelConfig,
  s: ShardSpec,
  i: number,
  cuts: ColumnCuts,
): Promise<AttentionWeights> {
  const p = `blk.${i}.`;
  const hd = c.headDim;
  const kv = kvHeadsFor(c, s.heads);
  const qRows = { start: s.heads.start * hd, end: s.heads.end * hd };
  const kvRows = { start: kv.start * hd, end: kv.end * hd };
  const width = c.embeddingLength;
  const w: AttentionWeights = {
    norm: await l.vector(`${p}attn_norm.weight`, width),
    qkv: await l.stacked([
      { name: `${p}attn_q.weight`, expect: { rows: c.headCount * hd, cols: width }, rows: qRows },
      { name: `${p}attn_k.weight`, expect: { rows: c.headCountKv * hd, cols: width }, rows: kvRows },
      { name: `${p}attn_v.weight`, expect: { rows: c.headCountKv * hd, cols: width }, rows: kvRows },
    ]),
    o: await l.leaves(
      `${p}attn_output.weight`,
      { rows: c.embeddingLength, cols: c.headCount * hd },
      qRows,
      hd,
      cuts,
    ),
  };
  if (c.hasQkvBias) {
    w.qBias = await l.vector(`${p}attn_q.bias`, c.headCount * hd, qRows);
    w.kBias = await l.vector(`${p}attn_k.bias`, c.headCountKv * hd, kvRows);
    w.vBias = await l.vector(`${p}attn_v.bias`, c.headCountKv * hd, kvRows);
  }
  if (c.hasQkNorm) {
    w.qNorm = await l.vector(`${p}attn_q_norm.weight`, hd);
    w.kNorm = await l.vector(`${p}attn_k_norm.weight`, hd);
  }
  return w;
}

/** A SwiGLU FFN slice (a dense FFN, a routed expert `base`, or the shared expert), down in leaves on `cuts`. */
async function loadFfn(
  l: WeightLoader,
  names: [string, string, string],
  width: number,
  ff: number,
  hidden: Range,
  base: number,
  cuts: ColumnCuts,
): Promise<FfnWeights> {
  const [gate, up, down] = names;
  return {
    gateUp: await l.stacked([
      { name: gate, expect: { rows: ff, cols: width }, rows: hidden, base: base * ff },
      { name: up, expect: { rows: ff, cols: width }, rows: hidden, base: base * ff },
    ]),
    down: await l.leaves(down, { rows: width, cols: ff }, hidden, 1, cuts, base * width),
    hidden: rangeLength(hidden),
  };
}

/** Routed experts `ids` of model layer `i`, each over the shard's slice of its hidden units. */
async function loadRoutedExperts(
  l: WeightLoader,
  c: ModelConfig,
  s: ShardSpec,
  i: number,
  ids: readonly number[],
  cuts: ColumnCuts,
): Promise<Map<number, FfnWeights>> {
  const p = `blk.${i}.`;
  const experts = new Map<number, FfnWeights>();
  const names: [string, string, string] = [
    `${p}ffn_gate_exps.weight`,
    `${p}ffn_up_exps.weight`,
    `${p}ffn_down_exps.weight`,
  ];
  if (rangeLength(s.expertFfn) === 0) return experts;
  for (const e of ids)
    experts.set(
      e,
      await loadFfn(l, names, c.embeddingLength, c.expertFeedForwardLength, s.expertFfn, e, cuts),
    );
  return experts;
}

/**
 * Loads routed experts `ids` of model layer `layer` for a shard already loaded (`group` as
 * at its load): what a re-placement of experts adds beside the ones the shard holds.
 */
export async function loadLayerExperts(
  file: ModelFile,
  kernels: Kernels,
  c: ModelConfig,
  s: ShardSpec,
  group: readonly ShardSpec[] | undefined,
  layer: number,
  ids: readonly number[],
): Promise<Map<number, FfnWeights>> {
  const cuts = columnCuts(file, c, group);
  return loadRoutedExperts(new WeightLoader(file, kernels), c, s, layer, ids, cuts.experts);
}

async function loadMoe(
  l: WeightLoader,
  c: ModelConfig,
  s: ShardSpec,
  i: number,
  cuts: Record<'experts' | 'shared', ColumnCuts>,
): Promise<MoeWeights> {
  const p = `blk.${i}.`;
  const width = c.embeddingLength;
  const moe: MoeWeights = {
    router: await l.matrix(`${p}ffn_gate_inp.weight`, { rows: c.expertCount, cols: width }),
    experts: await loadRoutedExperts(l, c, s, i, expertsInLayer(s, i), cuts.experts),
  };
  if (c.sharedExpertFeedForwardLength > 0 && rangeLength(s.sharedFfn) > 0) {
    const shNames: [string, string, string] = [
      `${p}ffn_gate_shexp.weight`,
      `${p}ffn_up_shexp.weight`,
      `${p}ffn_down_shexp.weight`,
    ];
    const ffn = await loadFfn(
      l,
      shNames,
      width,
      c.sharedExpertFeedForwardLength,
      s.sharedFfn,
      0,
      cuts.shared,
    );
    moe.shared = { ...ffn, gate_inp: await l.vector(`${p}ffn_gate_inp_shexp.weight`, width) };
  }
  return moe;
}

/**
 * Where the exact tensor-parallel group sizes cut attn_output's and ffn_down's input columns
 * (the planner's splits, tp-split.ts), and this shard's group's ranges when `group` (the
 * shards of its tensor-parallel group, in rank order) is given.
 */
export function columnCuts(
  file: ModelFile,
  c: ModelConfig,
  group: readonly ShardSpec[] | undefined,
): Record<'heads' | 'ffn' | 'experts' | 'shared', ColumnCuts> {
  const splits = EXACT_GROUP_SIZES.map((size) =>
    Array.from({ length: size }, (_, r) => tensorSplit(c, file.tensors, size, r, false)).slice(1),
  );
  const cuts = (range: (s: Omit<ShardSpec, 'layers' | 'embed' | 'head'>) => Range): ColumnCuts => ({
    sets: splits.map((ranks) => ranks.map((r) => range(r).start)),
    ...(group ? { group: group.map(range) } : {}),
  });
  return {
    heads: cuts((s) => ({ start: s.heads.start * c.headDim, end: s.heads.end * c.headDim })),
    ffn: cuts((s) => s.ffn),
    experts: cuts((s) => s.expertFfn),
    shared: cuts((s) => s.sharedFfn),
  };
}

/** Loads everything a shard needs; `group`: the shards of its tensor-parallel group, in rank order (for exact sums). */
export async function loadShardWeights(
  file: ModelFile,
  kernels: Kernels,
  c: ModelConfig,
  s: ShardSpec,
  group?: readonly ShardSpec[],
  onLayer?: (loaded: number, total: number) => void,
): Promise<ShardWeights> {
  const l = new WeightLoader(file, kernels);
  const cuts = columnCuts(file, c, group);
  const width = c.embeddingLength;
  const out: ShardWeights = { layers: [] };
  if (c.hasRopeFreqFactors) out.ropeFreqFactors = await l.vector('rope_freqs.weight', c.headDim / 2);
  if (s.embed) out.embed = await l.matrix('token_embd.weight', { rows: c.vocabSize, cols: width });
  out.layers = await loadLayers(
    file,
    kernels,
    l,
    (loader, i) => loadLayer(loader, c, s, i, cuts),
    s.layers,
    onLayer,
  );
  if (s.head) {
    out.outputNorm = await l.vector('output_norm.weight', width);
    const name = c.tiedEmbeddings ? 'token_embd.weight' : 'output.weight';
    const whole = s.vocab.start === 0 && s.vocab.end === c.vocabSize;
    out.output =
      c.tiedEmbeddings && whole && out.embed
        ? out.embed
        : await l.matrix(name, { rows: c.vocabSize, cols: width }, { rows: s.vocab });
  }
  return out;
}

async function loadLayer(
  l: WeightLoader,
  c: ModelConfig,
  s: ShardSpec,
  i: number,
  cuts: ReturnType<typeof columnCuts>,
): Promise<LayerWeights> {
  const layer: LayerWeights = {
    attention: await loadAttention(l, c, s, i, cuts.heads),
    ffnNorm: await l.vector(`blk.${i}.ffn_norm.weight`, c.embeddingLength),
  };
  if (c.expertCount > 0) layer.moe = await loadMoe(l, c, s, i, cuts);
  else if (rangeLength(s.ffn) > 0) {
    const p = `blk.${i}.`;
    layer.ffn = await loadFfn(
      l,
      [`${p}ffn_gate.weight`, `${p}ffn_up.weight`, `${p}ffn_down.weight`],
      c.embeddingLength,
      c.feedForwardLength,
      s.ffn,
      0,
      cuts.ffn,
    );
  }
  return layer;
}

/**
 * Layers `range`, by local index, each loaded by `one`. With `file.readsInFlight` above 1 that
 * many layers load at once, each through a loader (and scratch buffer) of its own, so a remote
 * file's next reads are on the wire while earlier bytes are uploaded; a layer's own reads keep
 * their order. Every loader has stopped before this returns or throws (the first error).
 */
async function loadLayers(
  file: ModelFile,
  kernels: Kernels,
  first: WeightLoader,
  one: (l: WeightLoader, layer: number) => Promise<LayerWeights>,
  range: Range,
  onLayer?: (loaded: number, total: number) => void,
): Promise<LayerWeights[]> {
  const total = rangeLength(range);
  const layers = new Array<LayerWeights>(total);
  const lanes = Math.max(1, Math.min(total, Math.floor(file.readsInFlight ?? 1)));
  let next = range.start;
  let loaded = 0;
  let failed = false;
  const lane = async (l: WeightLoader): Promise<void> => {
    for (let i = next++; i < range.end && !failed; i = next++) {
      try {
        layers[i - range.start] = await one(l, i);
      } catch (e) {
        failed = true;
        throw e;
      }
      onLayer?.(++loaded, total);
    }
  };
  const loaders = [first, ...Array.from({ length: lanes - 1 }, () => new WeightLoader(file, kernels))];
  const settled = await Promise.allSettled(loaders.map(lane));
  const error = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (error) throw error.reason;
  return layers;
}
