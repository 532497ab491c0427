// What GpuLlama is given: a llama-family model's hyperparameters, and what a shard of it holds.
import type { RopeParams } from '../types.js';
import type { GpuExpertSlice } from './gpu-layer-weights.js';
import type { GpuExpertExchange, GpuMoeShape } from './gpu-moe.js';

/**
 * The hyperparameters of a llama-family model (llama, qwen2/qwen3, their MoE variants) the
 * GPU forward pass needs; qwen2's biases and qwen3's q/k norms are found by their tensors.
 */
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
  /** Mixture of experts (absent: dense); `width` is the model's. */
  moe?: Omit<GpuMoeShape, 'width'>;
  /**
   * A shard of the model (tensor or pipeline parallel): `layers`, `heads`, `kvHeads` and `ffn`
   * above are then the shard's own counts. Absent: the whole model.
   */
  shard?: GpuShardShape;
}

/**
 * Sums a row-parallel partial output of the shard's layer `layer` across the tensor-parallel
 * group (attention's o or the FFN's down [n, width]; an MoE layer's routed slot outputs
 * [n * used, width] or its shared expert's [n, width]), in place: every rank of the group calls
 * it with the same n, in the same order, and every rank gets the same sum back.
 */
export type GpuReduce = (
  partial: Float32Array,
  layer: number,
  half: 'attention' | 'ffn' | 'experts' | 'shared',
) => Promise<void>;

/** What a shard holds beyond its counts, and how its group sums. */
export interface GpuShardShape {
  /** The model layer of the shard's layer 0 (tensors are read by model layer). */
  firstLayer: number;
  /** Whether it embeds token ids (holds `token_embd.weight`) and holds the output head. */
  embed: boolean;
  head: boolean;
  /** Rows of the output head it holds (its vocabulary slice; the reader gives `output.weight` as those rows). */
  vocabRows: number;
  /**
   * Rows recorded per pass (default GPU_CHUNK). With `reduce` a pass's rows are summed across
   * the group at once, so every rank of the group must cut its rows where the others do.
   */
  chunk?: number;
  /** Present when the shard's tensor-parallel group has more than one rank. */
  reduce?: GpuReduce;
  /**
   * The model's query heads per KV head, and the place of the shard's first head in its KV
   * group: local head h attends with local KV head (h + headOffset) / kvGroup. Defaults
   * heads / kvHeads and 0 (the shard's heads begin a group).
   */
  kvGroup?: number;
  headOffset?: number;
  /** The routed experts held in model layer `layer` and their slice (absent: every expert whole). */
  expertSlice?: (layer: number) => GpuExpertSlice;
  /** Expert parallel: the group's exchange of routed tokens (absent: the shard runs its experts on every token). */
  experts?: GpuExpertExchange;
}
