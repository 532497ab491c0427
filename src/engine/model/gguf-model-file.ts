import { FolderGgufSource } from '../format/folder-gguf-source.js';
import { GgufFile } from '../format/gguf-reader.js';
import type { GgufArray } from '../format/gguf-types.js';
import { isModelFolder, openModelFolder } from '../format/model-folder.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../tokenizer/index.js';
import type { ModelFile, TensorEntry } from './model-file.js';

/** A GGUF file as the model code sees it: metadata values, tensor dims, row-range reads. */
export class GgufModelFile implements ModelFile {
  readonly tensors: ReadonlyMap<string, TensorEntry>;

  constructor(readonly gguf: GgufFile) {
    this.tensors = new Map(gguf.tensors.map((t) => [t.name, { type: t.type.id, dims: t.dims }]));
  }

  /** Opens a GGUF file, or a Hugging Face / MLX model folder read as the GGUF it converts to. */
  static open(path: string): GgufModelFile {
    if (isModelFolder(path))
      return new GgufModelFile(GgufFile.fromSource(new FolderGgufSource(openModelFolder(path))));
    return new GgufModelFile(GgufFile.open(path));
  }

  /** Scalars as they are; arrays as their items (strings, numbers in typed arrays). */
  meta(key: string): unknown {
    const v = this.gguf.metadata.get(key);
    if (v === undefined) return undefined;
    if (typeof v.value === 'object') return (v.value as GgufArray).items;
    return v.value;
  }

  readRows(name: string, start: number, count: number, into?: Uint8Array): Uint8Array {
    return this.gguf.readTensor(name, { rows: [start, start + count] }, into);
  }

  /** Bytes of the file on disk. */
  get fileSize(): number {
    return this.gguf.fileSize;
  }

  close(): void {
    this.gguf.close();
  }
}

/** The tokenizer in a GGUF model file, or undefined when the file has none. */
export function readTokenizer(path: string): Tokenizer | undefined {
  const file = GgufModelFile.open(path);
  try {
    const entries = file.gguf.metadata.entries;
    return entries.has('tokenizer.ggml.tokens')
      ? new Tokenizer(tokenizerMetadataFromGguf(entries))
      : undefined;
  } finally {
    file.close();
  }
}
