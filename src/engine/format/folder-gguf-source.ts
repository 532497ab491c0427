import { GGUF_DEFAULT_ALIGNMENT } from './gguf-types.js';
import type { ByteSource } from './byte-source.js';
import { encodeHeader, layoutTensors, type TensorLayout } from './gguf-writer.js';
import type { FolderTensor, ModelFolder } from './model-folder.js';

/**
 * A model folder presented as the bytes of the GGUF file it converts to: the header is
 * encoded in memory, and a read of tensor data converts just the rows it covers. GgufFile
 * parses it like a file on disk, so every reader of GGUF (the engine, shards, `convert`)
 * takes a folder unchanged, and a shard converts only its own rows.
 */
export class FolderGgufSource implements ByteSource {
  readonly name: string;
  readonly size: number;
  private readonly header: Uint8Array;
  private readonly layout: TensorLayout[];
  private readonly byName: Map<string, FolderTensor>;

  constructor(
    private readonly folder: ModelFolder,
    private readonly alignment = GGUF_DEFAULT_ALIGNMENT,
  ) {
    this.name = folder.dir;
    this.layout = layoutTensors(folder.tensors, alignment);
    this.header = encodeHeader(folder.metadata, this.layout, alignment);
    this.byName = new Map(folder.tensors.map((t) => [t.name, t]));
    const last = this.layout[this.layout.length - 1];
    this.size =
      this.header.length + (last ? last.offset + Math.ceil(last.byteLength / alignment) * alignment : 0);
  }

  readInto(offset: number, length: number, into: Uint8Array): void {
    const end = offset + length;
    into.fill(0, 0, length);
    if (offset < this.header.length)
      into.set(this.header.subarray(offset, Math.min(end, this.header.length)), 0);
    for (const t of this.layout) {
      const from = this.header.length + t.offset;
      const to = from + t.byteLength;
      if (to <= offset || from >= end) continue;
      this.copyTensor(
        t,
        Math.max(offset, from) - from,
        Math.min(end, to) - from,
        into,
        Math.max(offset, from) - offset,
      );
    }
  }

  /** Copies bytes [a, b) of tensor `t` to `into[at...]`, converting the rows that cover them. */
  private copyTensor(t: TensorLayout, a: number, b: number, into: Uint8Array, at: number): void {
    const rows = t.dims.slice(1).reduce((x, y) => x * y, 1);
    const rowBytes = t.byteLength / rows;
    const first = Math.floor(a / rowBytes);
    const last = Math.ceil(b / rowBytes);
    const bytes = (this.byName.get(t.name) as FolderTensor).readRows(first, last - first);
    into.set(bytes.subarray(a - first * rowBytes, b - first * rowBytes), at);
  }

  close(): void {
    this.folder.close();
  }
}
