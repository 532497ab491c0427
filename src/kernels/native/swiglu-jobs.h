// The SwiGLU jobs' split, shared by the AVX-512 and AVX2 (ops.c) and NEON (ops-neon.c) builds:
// each includes this after defining its own span kernel
//   static inline void swiglu_span(const float *G, const float *U, float *O, int i0, int i1);
// (out[i] = silu(g[i]) * u[i] for i in [i0, i1), out may alias g).
#ifndef TANDEM_SWIGLU_JOBS_H
#define TANDEM_SWIGLU_JOBS_H

// Rows y [n, ystride] holding [gate (half), up (half)] each: row t's first `half` values
// become silu(gate) * up in place (the fused gate/up projection's SwiGLU). Tokens split.
void tk_swiglu_rows(uintptr_t base, uint32_t y, int ystride, int half, int n, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    float *G = (float *)(m + y) + (size_t)t * ystride;
    swiglu_span(G, G + half, G, 0, half);
  }
}

// out = silu(g) * u over count elements (out may alias g).
void tk_swiglu(uintptr_t base, uint32_t g, uint32_t u, uint32_t out, int count, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  swiglu_span((const float *)(m + g), (const float *)(m + u), (float *)(m + out), part(count, tid, nt), part(count, tid + 1, nt));
}
#endif
