/** Types of build-kernels.js (plain JS so bin/build.js runs without tsx). */
export declare const wasmSourceDir: string;
export declare const wasmPath: string;
export declare const reduceWasmPath: string;
export declare const nativeSource: string;
export declare const nativeDir: string;
export declare const nativeSources: string[];
export declare const nativeSourcesByArch: Readonly<Record<'x64' | 'arm64', string[]>>;
export declare const nativePath: string;
export declare const ascFlags: readonly string[];
export declare const reduceAscFlags: readonly string[];
/** Whether `path` (default kernels.wasm) is missing or older than the AssemblyScript sources. */
export declare function isStale(path?: string): boolean;
/** Builds build/wasm/kernels.wasm and reduce.wasm if stale (or forced); returns kernels.wasm's path. */
export declare function buildKernels(options?: { force?: boolean; quiet?: boolean }): Promise<string>;
/** Builds build/wasm/reduce.wasm if stale (or forced); returns its path. */
export declare function buildReduceWasm(options?: { force?: boolean; quiet?: boolean }): Promise<string>;
/** Builds build/native/kernels-<arch>.so (the compiler's target: x86-64 or arm64) if stale (or forced); returns its path; throws without a working compiler. */
export declare function buildNative(options?: { force?: boolean; quiet?: boolean }): Promise<string>;
