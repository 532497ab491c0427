import { performance } from 'node:perf_hooks';
import { Model } from '../engine/index.js';
import { GgmlType, rowBytes, type Kernels } from '../kernels/index.js';
import type { PrefillShape } from '../parallel/index.js';
import { probeFile, timedKernels, type KernelTime } from './calibrate-prefill.js';

// The decode probe: a Llama model at a real model's layer shapes (Q8_0 weights, synthetic
// values, a 256-token vocabulary), deep enough that its layers' weights fill a working set far
// beyond the last-level cache, so each decode step streams them from memory as a real model's
// step does. Its steps run the engine's own calls (the fused q/k/v and gate/up matvecs, the
// row-parallel o and down cut into the engine's leaves, attention over the context, norms,
// RoPE, the KV store, the JS between them) on the kernels under test. Timing each call splits a
// layer's step into the weights' stream at the model's shapes (every matvec, each with its call
// and, on more than one thread, its hand-off to the workers), attention, and the rest.

/** Bytes of layer weights the probe holds: 16x a 32 MiB last-level cache, as the stream probe's. */
const WORKING_SET_BYTES = 512 << 20;
const MAX_LAYERS = 64;
/** Decode steps after the prompt before the cache is cut back to it (`bench model`'s default tokens). */
const DECODE_WINDOW = 32;
/** Decode steps of one sample run until this many ms have passed (at least one). */
const SAMPLE_MS = 300;

/** Q8_0 bytes of one layer's matrices of shape `s` (q, k, v, o, gate, up, down). */
export function layerQ8Bytes(s: PrefillShape): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const at = (rows: number, cols: number): number => rows * rowBytes(GgmlType.Q8_0, cols);
  return (
    at(q, s.hidden) + 2 * at(kv, s.hidden) + at(s.hidden, q) + 2 * at(s.ff, s.hidden) + at(s.hidden, s.ff)
  );
}

/** Layers of shape `s` whose weights fill the working set (at least 1, at most MAX_LAYERS). */
export function decodeProbeLayers(s: PrefillShape): number {
  return Math.min(MAX_LAYERS, Math.max(1, Math.ceil(WORKING_SET_BYTES / layerQ8Bytes(s))));
}

/** One layer's decode step, ms: its weights' matvecs, attention, everything else; and its kernel calls. */
export interface DecodeSample {
  weightsMs: number;
  attentionMs: number;
  otherMs: number;
  callsPerLayer: number;
}

/** A sample as rates: the layer weights' bytes a second at these shapes, and the rest of a layer, ms. */
export function decodeRates(
  sample: DecodeSample,
  s: PrefillShape,
): { layerBytesPerS: number; layerOverheadMs: number } {
  return {
    layerBytesPerS: layerQ8Bytes(s) / (Math.max(1e-6, sample.weightsMs) / 1000),
    layerOverheadMs: sample.attentionMs + sample.otherMs,
  };
}

/** The probe loaded on `kernels`: each sample() runs decode steps for SAMPLE_MS and returns their mean per layer. */
export interface DecodeProbe {
  readonly shape: PrefillShape;
  readonly layers: number;
  sample(): Promise<DecodeSample>;
}

/**
 * Opens the decode probe at `shape` (`shape.tokens`: the prompt before the decode steps) with
 * `layers` layers (default: enough to fill WORKING_SET_BYTES). The prompt is prefilled once;
 * each sample's steps run at a context from the prompt to the prompt plus DECODE_WINDOW, as a
 * `bench model` run's do.
 */
export async function openDecodeProbe(
  kernels: Kernels,
  shape: PrefillShape,
  layers = decodeProbeLayers(shape),
): Promise<DecodeProbe> {
  const spent: KernelTime = { gemm: 0, attention: 0, calls: 0 };
  const context = shape.tokens + DECODE_WINDOW + 8;
  const model = await Model.load(probeFile(shape, layers, context), timedKernels(kernels, spent));
  const prompt = Array.from({ length: shape.tokens }, (_, i) => (i * 37 + 1) % 256);
  const cache = model.newSession({ contextLength: context });
  await model.forward(prompt, cache);
  const step = async (token: number): Promise<number> => {
    if (cache.length >= shape.tokens + DECODE_WINDOW) cache.truncate(shape.tokens);
    const t0 = performance.now();
    await model.forward([token], cache);
    return performance.now() - t0;
  };
  await step(1); // compiles the decode path
  return {
    shape,
    layers,
    async sample(): Promise<DecodeSample> {
      spent.gemm = spent.attention = spent.calls = 0;
      let total = 0;
      let steps = 0;
      while (steps === 0 || total < SAMPLE_MS) total += await step((++steps * 31) % 256);
      const per = steps * layers;
      return {
        weightsMs: spent.gemm / per,
        attentionMs: spent.attention / per,
        otherMs: Math.max(0, total - spent.gemm - spent.attention) / per,
        callsPerLayer: spent.calls / per,
      };
    },
  };
}
