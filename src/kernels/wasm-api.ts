/**
 * The few WebAssembly JS API types the kernels use. The project's TypeScript lib has no DOM
 * (where `WebAssembly` is declared), so they are declared here, module-local, instead of
 * adding a global declaration another layer could collide with.
 */
export interface WasmMemory {
  readonly buffer: SharedArrayBuffer;
  grow(pages: number): number;
}

/** A compiled module (opaque; postable to workers). */
export type WasmModule = object & { readonly __wasmModule?: never };

export interface WasmInstance {
  readonly exports: Record<string, unknown>;
}

interface WasmApi {
  Memory: new (descriptor: { initial: number; maximum: number; shared: true }) => WasmMemory;
  Instance: new (module: WasmModule, imports: Record<string, Record<string, unknown>>) => WasmInstance;
  compile(bytes: Uint8Array): Promise<WasmModule>;
}

export const wasmApi = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
