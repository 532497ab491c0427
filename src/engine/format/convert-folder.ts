import { writeGguf } from './gguf-writer.js';
import { openModelFolder, type FolderTensor } from './model-folder.js';
import type { FileTypeName } from './model-plan.js';

export interface ConvertOptions {
  /** File type; default: keep the stored dtypes (MLX-quantized weights become F16). */
  type?: FileTypeName;
  onProgress?: (written: number, total: number, tensor: string) => void;
}

/** Bytes converted per chunk: bounds memory to a few chunks whatever the tensor's size. */
const CHUNK_BYTES = 16 * 2 ** 20;

function* chunks(t: FolderTensor): Generator<Uint8Array> {
  const cols = t.dims[0] as number;
  const rows = t.dims.slice(1).reduce((a, b) => a * b, 1);
  const step = Math.max(1, Math.floor(CHUNK_BYTES / (cols * 4)));
  for (let r = 0; r < rows; r += step) yield t.readRows(r, Math.min(step, rows - r));
}

/**
 * Writes a model folder (Hugging Face or MLX) as a GGUF file that the engine and llama.cpp
 * load, through a temporary file renamed on success (never a truncated `out`).
 */
export async function convertFolder(
  dir: string,
  out: string,
  options: ConvertOptions = {},
): Promise<{ bytes: number; arch: string; tensors: number }> {
  const folder = openModelFolder(dir, options.type !== undefined ? { type: options.type } : {});
  try {
    const byName = new Map(folder.tensors.map((t) => [t.name, t]));
    const { bytes } = await writeGguf(
      out,
      folder.metadata,
      folder.tensors,
      (layout) => chunks(byName.get(layout.name) as FolderTensor),
      options.onProgress ? { onProgress: options.onProgress } : {},
    );
    return { bytes, arch: folder.arch, tensors: folder.tensors.length };
  } finally {
    folder.close();
  }
}
