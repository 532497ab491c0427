import { TandemError } from '../../errors/index.js';

export type EngineId = 'tandem-cpu' | 'tandem-gpu' | 'mlx' | 'llama.cpp';
export const engineIds: readonly EngineId[] = ['tandem-cpu', 'tandem-gpu', 'mlx', 'llama.cpp'];

/**
 * How an engine turns a machine's peaks into speed. Decode: a token's weight bytes at
 * `decodeEfficiency` of the device's bandwidth, plus `layerOverheadMs` a layer (launches,
 * synchronisation: the part that does not shrink with bandwidth). Prefill: its FLOPs at
 * `prefillEfficiency` of the device's peak. docs/plan.md derives each number.
 */
export interface EngineModel {
  id: EngineId;
  /** The device a machine's engine computes on: GPU where the machine has one the engine drives. */
  device: (m: { kind: string; gpuTflops?: number }) => 'cpu' | 'gpu';
  decodeEfficiency: { cpu: number; gpu: number };
  layerOverheadMs: { cpu: number; gpu: number };
  prefillEfficiency: { cpu: number; gpu: number };
  /**
   * Tensor parallel splits the output head by vocabulary, so each step all-gathers the logits
   * (tandem: ShardComm.allGatherLogits); mlx-lm's tensor-parallel shard keeps the head whole.
   */
  shardsHead?: boolean;
  /**
   * A pipeline's prefill goes in micro-batches, stage s + 1 working on one while stage s works
   * on the next (tandem: microBatches, stageForward); elsewhere the stages take the prompt in turn.
   */
  pipelinesPrefill?: boolean;
  /**
   * Tensor parallel's all-reduce writes each rank's whole part into every peer's memory and
   * every rank sums the parts (tandem: TpExchange): one latency step, n - 1 parts out and in
   * per rank; elsewhere a ring-style all-reduce (2 (n - 1) / n of the bytes, log2 n steps).
   */
  exchangesDirect?: boolean;
  /**
   * Tensor parallel adds the ranks' parts in one node's order (tandem: leaves.ts), so a rank
   * whose columns cross a smaller group's cuts sends one part per subtree it holds
   * (groupPieces: 2 at 3 ranks, 1 at 2 and 4).
   */
  sumsExactly?: boolean;
  /** Where the numbers come from; `validated` says whether measured cases check them. */
  basis: string;
  validated: boolean;
}

/*
 * llama.cpp Metal, fitted on two cases of the llama.cpp Apple silicon table (discussion
 * #4167, Llama 2 7B Q4_0, tg128 / pp512): M4 Pro 50.7 / 440 and M4 Max 83.1 / 886 tok/s.
 * Two decode points give the bandwidth share (0.885) and the per-layer cost (0.136 ms);
 * prefill reaches 0.634 of the GPU's FP32 peak. llama.cpp CPU: a 13900K with DDR5-6400
 * (102 GB/s) decoded 7B Q4_0 at 18.3 tok/s on 8 threads (llama.cpp issue #34): 0.68.
 */
const llamaCpp: EngineModel = {
  id: 'llama.cpp',
  device: (m) => (m.kind === 'apple' && m.gpuTflops !== undefined ? 'gpu' : 'cpu'),
  decodeEfficiency: { cpu: 0.68, gpu: 0.885 },
  layerOverheadMs: { cpu: 0.02, gpu: 0.136 },
  prefillEfficiency: { cpu: 0.3, gpu: 0.634 },
  basis:
    'fitted on llama.cpp discussion #4167 (M4 Pro, M4 Max) and issue #34 (13900K); checked on the others in docs/plan.md',
  validated: true,
};

export const engines: Record<EngineId, EngineModel> = {
  'llama.cpp': llamaCpp,
  mlx: {
    ...llamaCpp,
    id: 'mlx',
    device: (m) => (m.kind === 'apple' ? 'gpu' : 'cpu'),
    basis:
      "assumed equal to llama.cpp Metal's figures (no single-machine MLX table was checked); cluster cases in docs/plan.md",
    validated: false,
  },
  'tandem-cpu': {
    id: 'tandem-cpu',
    device: () => 'cpu',
    shardsHead: true,
    pipelinesPrefill: true,
    exchangesDirect: true,
    sumsExactly: true,
    decodeEfficiency: { cpu: 0.6, gpu: 0.6 },
    layerOverheadMs: { cpu: 0.03, gpu: 0.03 },
    prefillEfficiency: { cpu: 0.25, gpu: 0.25 },
    basis:
      "0.9x llama.cpp CPU's decode share (tandem's Q8_0 decode is 0.8-0.9x llama.cpp's, docs/benchmarks.md); on 'this' the calibration's measured rates replace it",
    validated: false,
  },
  'tandem-gpu': {
    ...llamaCpp,
    id: 'tandem-gpu',
    shardsHead: true,
    pipelinesPrefill: true,
    exchangesDirect: true,
    sumsExactly: true,
    device: (m) => (m.gpuTflops !== undefined ? 'gpu' : 'cpu'),
    decodeEfficiency: { cpu: 0.6, gpu: 0.885 * 0.7 },
    prefillEfficiency: { cpu: 0.25, gpu: 0.634 * 0.5 },
    basis:
      "not measured: tandem's WebGPU path has no GPU figures yet; its goals (0.7x llama.cpp decode, 0.5x prefill) are assumed",
    validated: false,
  },
};

export function findEngine(id: string): EngineModel {
  const e = engines[id.trim().toLowerCase() as EngineId];
  if (!e)
    throw new TandemError('PAR_UNKNOWN_ENGINE', `plan: unknown engine '${id}'`, {
      hint: `use one of: ${engineIds.join(', ')}`,
      details: { engine: id },
    });
  return e;
}
