import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { loadWasmReduce } from './reduce-wasm.js';
import { reduceConformance } from './reduce-fast.cases.js';

// Lengths cross the module's chunks (8192 f32/i32, 16384 f16/bf16 elements) and leave partial vectors.
reduceConformance('wasm', loadWasmReduce, [1, 3, 9, 8191, 8193, 16385, 20001]);

test('with TANDEM_NATIVE_REDUCE=0, reduceFast runs the wasm kernels from the thresholds up and reduce.ts below', async () => {
  const module = pathToFileURL(join(import.meta.dirname, 'reduce-native.ts')).href;
  // a process of its own: the environment is read once, at the first loadFastReduce
  const script = `
    const m = await import(${JSON.stringify(module)});
    const native = await m.loadFastReduce();
    const a = Float32Array.from({ length: 1000 }, (_, i) => i / 7);
    m.reduceFast('sum', 'f32', a, Float32Array.from({ length: 1000 }, (_, i) => 1 - i));
    const paths = ['f32', 'i32', 'f16', 'bf16'].flatMap((d) => [m.reducePath(d, 31), m.reducePath(d, 256)]);
    console.log(JSON.stringify({ native, reason: m.nativeReduceReason, wasm: m.wasmReduceReason, paths, a5: a[5] }));`;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', script],
    {
      env: { ...process.env, TANDEM_NATIVE_REDUCE: '0' },
      timeout: 60_000,
    },
  );
  const got = JSON.parse(stdout) as {
    native: boolean;
    reason: string;
    wasm: string;
    paths: string[];
    a5: number;
  };
  assert.equal(got.native, false);
  assert.equal(got.reason, 'disabled by TANDEM_NATIVE_REDUCE=0');
  assert.equal(got.wasm, '');
  assert.deepEqual(got.paths, ['ts', 'wasm', 'ts', 'wasm', 'ts', 'wasm', 'ts', 'wasm']);
  assert.equal(got.a5, Math.fround(Math.fround(5 / 7) + (1 - 5)));
});
