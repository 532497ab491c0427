// Float rows between a kernels memory and other memory of the process (a JavaScript array's
// backing store, whose address `far` the caller took with tk_addr), on the pool's threads: the
// matmuls' activations in and results out. Portable C (both architectures' libraries).
#include <string.h>
#include "common.h"

// n rows of cols floats: dense at far, `stride` floats apart at byte offset `off` of the memory.
// in != 0: far -> memory; else memory -> far. Thread tid copies elements [a, b) of the dense
// order, a and b multiples of 16 (a cache line) but the last end, so no two threads write one line.
void tk_copy_rows(uintptr_t base, uintptr_t far, uint32_t off, int stride, int cols, int n, int in, int tid, int nt) {
  float *m = (float *)((uint8_t *)base + off);
  float *d = (float *)far;
  const int64_t total = (int64_t)n * cols;
  int64_t i = tid == 0 ? 0 : (total * tid / nt) & ~(int64_t)15;
  const int64_t end = tid == nt - 1 ? total : (total * (tid + 1) / nt) & ~(int64_t)15;
  while (i < end) {
    const int64_t t = i / cols, j = i % cols;
    const int64_t len = cols - j < end - i ? cols - j : end - i;
    float *a = d + i;
    float *b = m + t * (int64_t)stride + j;
    if (in)
      memcpy(b, a, (size_t)len * 4);
    else
      memcpy(a, b, (size_t)len * 4);
    i += len;
  }
}

// TK_CLAIMS, for the loader's check against wasm-arena.ts CLAIMS_OFFSET.
int tk_claims_offset(void) { return (int)TK_CLAIMS; }

int tk_gemm_tokens(void) { return GEMM_TOKENS; }
