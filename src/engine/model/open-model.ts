import { createKernels, type Kernels, type KernelsBackend } from '../../kernels/index.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../tokenizer/index.js';
import type { ShardComm } from './comm.js';
import { GgufModelFile } from './gguf-model-file.js';
import { Model } from './model.js';
import type { ShardSpec } from './shard.js';

export interface OpenModelOptions {
  /** Compute threads, the caller's included; default all cores. */
  threads?: number;
  backend?: KernelsBackend;
  shard?: ShardSpec;
  comm?: ShardComm;
  /** Also build the tokenizer from the file's metadata (default true). */
  tokenizer?: boolean;
  /** Called after each layer's weights are uploaded. */
  onLayer?: (loaded: number, total: number) => void;
}

/** A model file opened and loaded on its own kernels, with its tokenizer. */
export interface OpenedModel {
  file: GgufModelFile;
  kernels: Kernels;
  model: Model;
  tokenizer?: Tokenizer;
  /** Releases the kernels' threads and memory and closes the file. */
  close(): Promise<void>;
}

/** Opens a GGUF file, starts kernels and loads the model (or shard) into them. */
export async function openModel(path: string, options: OpenModelOptions = {}): Promise<OpenedModel> {
  const file = GgufModelFile.open(path);
  let kernels: Kernels | undefined;
  try {
    kernels = await createKernels({
      ...(options.threads !== undefined ? { threads: options.threads } : {}),
      ...(options.backend ? { backend: options.backend } : {}),
    });
    const model = await Model.load(file, kernels, {
      ...(options.shard ? { shard: options.shard } : {}),
      ...(options.comm ? { comm: options.comm } : {}),
      ...(options.onLayer ? { onLayer: options.onLayer } : {}),
    });
    const tokenizer =
      options.tokenizer === false
        ? undefined
        : new Tokenizer(tokenizerMetadataFromGguf(file.gguf.metadata.entries));
    const k = kernels;
    return {
      file,
      kernels: k,
      model,
      ...(tokenizer ? { tokenizer } : {}),
      async close() {
        await k.close();
        file.close();
      },
    };
  } catch (error) {
    await kernels?.close();
    file.close();
    throw error;
  }
}
