import {
  GgufModelFile,
  SequenceCache,
  Tokenizer,
  configFromMetadata,
  matrixShape,
  tokenizerMetadataFromGguf,
  type ModelConfig,
} from '../engine/index.js';
import { GgmlType, typeName, type GgmlTypeId } from '../kernels/index.js';
import {
  GPU_CHUNK,
  GpuLlama,
  gpuRowBytes,
  gpuTypes,
  type GpuDevice,
  type GpuLimits,
  type GpuRefusal,
  type GpuTensorReader,
} from '../kernels/webgpu/index.js';
import { gpuLlamaSpec } from '../parallel/gpu-shard-slices.js';

/**
 * A GGUF model on the WebGPU backend, with what `run` and `bench model` need of it: its
 * config, sessions (SequenceCache over a GPU-resident KV cache) and `forward`, the engine's
 * Forwarder, so `generate` drives it as it drives a CPU model.
 */
export interface GpuModel {
  readonly config: ModelConfig;
  readonly file: GgufModelFile;
  readonly tokenizer?: Tokenizer;
  readonly llama: GpuLlama;
  newSession(options?: { contextLength?: number; kvType?: 'f32' | 'f16' }): SequenceCache;
  forward(tokens: ArrayLike<number>, cache: SequenceCache): Promise<Float32Array>;
  /** One decode step of several sequences (token t at the next position of caches[t]); each row as it would alone. */
  forwardBatch(tokens: readonly number[], caches: readonly SequenceCache[]): Promise<Float32Array[]>;
  close(): Promise<void>;
}

function readConfig(file: GgufModelFile): ModelConfig {
  return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
}

/** The matrices the GPU holds: every 2-D tensor but the embedding (read on the host) unless it is the output. */
function gpuMatrices(file: GgufModelFile, config: ModelConfig): [string, GgmlTypeId, number][] {
  const out: [string, GgmlTypeId, number][] = [];
  for (const [name, t] of file.tensors) {
    if (t.dims.length < 2 || (name === 'token_embd.weight' && !config.tiedEmbeddings)) continue;
    out.push([name, t.type as GgmlTypeId, matrixShape(t).cols]);
  }
  return out;
}

/**
 * Why the model at `path` cannot run on an adapter with `limits` at `contextLength` (undefined:
 * it can): a weight type the WGSL kernels do not read, or a buffer past the adapter's largest
 * binding. Every architecture the engine runs (llama, qwen2/qwen3 and their MoE) runs here.
 */
export function gpuRefusalFor(path: string, contextLength: number | undefined): GpuRefusal {
  return (limits: GpuLimits) => {
    const file = GgufModelFile.open(path);
    try {
      const c = readConfig(file);
      const binding = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
      for (const [name, type, cols] of gpuMatrices(file, c)) {
        if (!gpuTypes.includes(type))
          return `tensor ${name} is ${typeName(type)}; the WGSL kernels read ${gpuTypes.map((t) => typeName(t)).join(', ')}`;
        if (gpuRowBytes(type, cols) > binding)
          return `a row of tensor ${name} (${gpuRowBytes(type, cols)} bytes) exceeds the adapter's largest storage binding (maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize}, maxBufferSize ${limits.maxBufferSize})`;
      }
      const ctx = Math.min(contextLength ?? c.contextLength, c.contextLength);
      const buffers: [string, number][] = [
        [`a layer's KV cache at a context of ${ctx} positions`, 4 * ctx * c.headCountKv * c.headDim],
        [`the attention scores at a context of ${ctx} positions`, 4 * GPU_CHUNK * c.headCount * ctx],
        [`the logits of ${GPU_CHUNK} rows`, 4 * GPU_CHUNK * c.vocabSize],
      ];
      for (const [what, bytes] of buffers)
        if (bytes > binding)
          return `${what} needs a ${bytes}-byte buffer, past the adapter's largest storage binding (maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize}, maxBufferSize ${limits.maxBufferSize})${what.includes('context') ? '; lower --context' : ''}`;
      return undefined;
    } finally {
      file.close();
    }
  };
}

/** Opens a GGUF file and loads it onto `device` (which the model then owns and destroys on close). */
export async function openGpuModel(
  path: string,
  device: GpuDevice,
  options: { tokenizer?: boolean; onLayer?: (loaded: number, total: number) => void } = {},
): Promise<GpuModel> {
  const file = GgufModelFile.open(path);
  try {
    const config = readConfig(file);
    const read: GpuTensorReader = async (name, expert) => {
      const t = file.tensors.get(name);
      if (!t) return undefined;
      const { rows: all, cols } = matrixShape(t);
      // a routed-expert tensor: one expert's rows
      const rows = expert ? all / expert.of : all;
      const data = await file.readRows(name, expert ? expert.index * rows : 0, rows);
      return { type: t.type as GgmlTypeId, rows, cols, data, name };
    };
    const factors = config.hasRopeFreqFactors ? await read('rope_freqs.weight') : undefined;
    const freqFactors =
      factors && factors.type === GgmlType.F32
        ? new Float32Array(factors.data.slice().buffer, 0, factors.cols)
        : undefined;
    const llama = await GpuLlama.load(device, gpuLlamaSpec(config, freqFactors), read, options.onLayer);
    const tokenizer =
      options.tokenizer === false
        ? undefined
        : new Tokenizer(tokenizerMetadataFromGguf(file.gguf.metadata.entries));
    return {
      config,
      file,
      llama,
      ...(tokenizer ? { tokenizer } : {}),
      newSession(o = {}) {
        return new SequenceCache(llama, {
          layers: config.blockCount,
          kvHeads: config.headCountKv,
          headDim: config.headDim,
          contextLength: Math.min(o.contextLength ?? config.contextLength, config.contextLength),
          type: o.kvType ?? 'f32',
        });
      },
      forward: (tokens, cache) => llama.forward(tokens, cache),
      forwardBatch: (tokens, caches) => llama.forwardBatch(tokens, caches),
      async close() {
        await device.finish();
        llama.destroy();
        device.destroy();
        file.close();
      },
    };
  } catch (error) {
    device.destroy();
    file.close();
    throw error;
  }
}

/** The `--kernels` help text, one for every command that takes it. */
export const kernelsDescription =
  'kernels backend: webgpu (the GPU through Dawn: llama, qwen2/qwen3 and their MoE with F32/F16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K weights, f32 KV cache), ' +
  'auto (webgpu where an adapter is found and the model fits its limits, else native, else wasm), native, wasm or reference ' +
  '(default: native when a C compiler builds it here, else wasm)';
