import { generate, Model, tinyModelFile } from '../engine/index.js';
import type { Kernels } from '../kernels/index.js';

/**
 * The narrow twin: a Llama model with the attention of TinyLlama and Llama 2 7B (32 query
 * heads of 64, 4 KV heads) and a residual width of 32, so its weights are a few hundred KB a
 * layer and stay in cache. A decode step of it costs what a layer costs beyond streaming its
 * weights: norms, RoPE, attention over the context, the SwiGLU, the kernels' calls and the
 * engine's JS between them. Fitting two depths separates that per-layer cost from the step's
 * own (embedding, head, sampling, the generate loop).
 */
const TWIN = { arch: 'llama', width: 32, heads: 32, kvHeads: 4, headDim: 64, ff: 64, vocab: 256 } as const;
const SHALLOW = 2;
const DEEP = 22;
/** The prompt before the decode steps (`bench model`'s and `bench cluster`'s default length). */
const TWIN_PROMPT_TOKENS = 128;
const DECODE_TOKENS = 32;
const RUNS = 3;

/** Parameters of one twin layer (for the bytes its decode step reads). */
function twinLayerParams(): number {
  const { width, heads, kvHeads, headDim, ff } = TWIN;
  return width * (heads + 2 * kvHeads) * headDim + heads * headDim * width + 3 * width * ff;
}

/** The middle of `values` (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Median over RUNS generations of the twin at `layers` deep: ms per decode step. */
async function timeTwin(kernels: Kernels, layers: number): Promise<number> {
  const model = await Model.load(tinyModelFile({ ...TWIN, layers, context: 512, seed: 3 }), kernels);
  const prompt = Array.from({ length: TWIN_PROMPT_TOKENS }, (_, i) => (i * 37 + 1) % TWIN.vocab);
  const decode: number[] = [];
  // one untimed generation compiles the paths
  for (let run = 0; run <= RUNS; run++) {
    const cache = model.newSession({ contextLength: TWIN_PROMPT_TOKENS + DECODE_TOKENS + 8 });
    const r = await generate(model, cache, prompt, { maxTokens: DECODE_TOKENS });
    if (run === 0) continue;
    decode.push(1000 / r.decodeTokS);
  }
  return median(decode);
}

/** What a node pays beyond its weights' bytes and FLOPs, from the twin at two depths. */
export interface FixedCosts {
  /** Decode, per layer per token (ms). */
  layerOverheadMs: number;
  /** Decode, per token beyond the layers: embedding, head call, sampling, the loop (ms). */
  stepOverheadMs: number;
}

/**
 * Fits the decode step's fixed costs on `kernels`. The twin's own weight reads (`bytesPerS`)
 * are taken out, as the forecast counts the real model's separately. (A prefill's costs come
 * from the probe at the model's own width, calibrate-prefill.ts: at a width of 32 the twin's
 * norms and stores cost nothing like a real layer's.)
 */
export async function measureFixedCosts(kernels: Kernels, rates: { bytesPerS: number }): Promise<FixedCosts> {
  const shallow = await timeTwin(kernels, SHALLOW);
  const deep = await timeTwin(kernels, DEEP);
  const readMs = ((twinLayerParams() * 4) / rates.bytesPerS) * 1000;
  const perLayer = (deep - shallow) / (DEEP - SHALLOW);
  return {
    layerOverheadMs: Math.max(1e-3, perLayer - readMs),
    stepOverheadMs: Math.max(0, shallow - SHALLOW * perLayer),
  };
}
