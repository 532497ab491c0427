import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadNativeLib, nativeUnavailableReason } from './native-lib.js';

/**
 * The native kernel tests skip where there are no native kernels, so a library that fails to
 * build or load would pass them all as skips. Where it must load (Linux x86-64 with a C
 * compiler and AVX2, as CI is), this fails instead, with the reason.
 */
function mustLoad(): string | undefined {
  if (process.platform !== 'linux' || process.arch !== 'x64') return 'not Linux x86-64';
  try {
    execFileSync(process.env.CC ?? 'cc', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'no C compiler';
  }
  const flags = readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m)?.[1] ?? '';
  return /\bavx2\b/.test(flags) ? undefined : 'no AVX2';
}

test('the native kernels build and load where a compiler and AVX2 are present', async (t) => {
  const why = mustLoad();
  if (why) return t.skip(why);
  const lib = await loadNativeLib();
  assert.ok(lib, `the native library did not load: ${nativeUnavailableReason}`);
  assert.match(lib.isa, /^avx/);
  // AVX2 without AVX-512 holds Q8_0 / Q4_0 in the grouped layout (gemm-avx2.c), whose tests
  // otherwise skip
  if (lib.isa === 'avx2') assert.ok(lib.prototypes.mm_q8g, 'an AVX2 build without the grouped kernels');
});
