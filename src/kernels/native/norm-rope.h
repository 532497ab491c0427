// RMSNorm and RoPE, bit-identical to their TypeScript references (ops-ref.ts), in plain C:
// element-wise work whose bits do not depend on the vector width the compiler picks, with no
// FMA contraction (each product rounded as the reference rounds it). Included once by the
// builds that have native ops: ops.c (AVX-512, AVX2) and ops-neon.c.
#ifndef TANDEM_NORM_ROPE_H
#define TANDEM_NORM_ROPE_H
#include <math.h>

// f32 squares summed in f64 in order, each step of the scale rounded to f32, then (x * scale)
// rounded before the weight multiplies it. x, out: [n, dim] (out may be x); w: [dim]; tokens split.
__attribute__((optimize("fp-contract=off"))) void tk_rms_norm(uintptr_t base, uint32_t x, uint32_t w, uint32_t out, int n, int dim, float eps, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const float *W = (const float *)(m + w);
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *X = (const float *)(m + x) + (size_t)t * dim;
    float *O = (float *)(m + out) + (size_t)t * dim;
    double sum = 0;
    for (int i = 0; i < dim; i++) {
      const float sq = X[i] * X[i];
      sum += (double)sq;
    }
    const float mean = (float)(sum / dim);
    const float s = (float)sqrt((double)(float)((double)mean + (double)eps));
    const float sc = (float)(1.0 / (double)s);
    for (int i = 0; i < dim; i++) {
      const float xs = X[i] * sc;
      O[i] = xs * W[i];
    }
  }
}

// RoPE in place: x [n, heads, hd]; cs [n, 2, half] f32 (cos then sin of each token's position,
// from the caller's angle table); neox pairs (i, i + half), else (2i, 2i + 1). Each product
// rounded to f32, the difference rounded once more (as JS does in f64). Tokens split.
__attribute__((optimize("fp-contract=off"))) void tk_rope(uintptr_t base, uint32_t x, uint32_t cs, int n, int heads, int hd, int half, int neox, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *C = (const float *)(m + cs) + (size_t)t * 2 * half;
    const float *S = C + half;
    for (int h = 0; h < heads; h++) {
      float *X = (float *)(m + x) + ((size_t)t * heads + h) * hd;
      for (int i = 0; i < half; i++) {
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = X[a], x1 = X[b], c = C[i], sn = S[i];
        const float p0 = x0 * c, p1 = x1 * sn, p2 = x0 * sn, p3 = x1 * c;
        X[a] = (float)((double)p0 - (double)p1);
        X[b] = (float)((double)p2 + (double)p3);
      }
    }
  }
}
#endif
