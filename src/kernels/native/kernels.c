// Native twins of the WebAssembly matmul kernels (src/kernels/wasm/matmul-q8.ts), compiled on
// the user's machine with -O3 -march=native when a C compiler is present and called through
// koffi. They work in place on a WebAssembly memory: `base` is the address of the memory's
// first byte and every other pointer argument is a byte offset into it, with the same layouts
// as the wasm kernels (quants [rowsPad, rowBytes], scales [rowsPad/4, nb, 4] f32,
// x16 [n, cols] i16, xd/xs [n, nb], y [n, ystride] f32). The threads of a call take tiles as
// they get to them (claims_take), tk_mm_float its static share [part(tiles, tid), part(tiles, tid + 1)).
#include "common.h"

uintptr_t tk_addr(uint8_t *p) { return (uintptr_t)p; }

const char *tk_isa(void) {
#if defined(__AVX512BW__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#else
  return "scalar";
#endif
}

// Q8_0 / Q4_0 weights of one block of 32 as 32 signed 8-bit values in element order. (AVX2
// builds without AVX-512 hold Q8_0 / Q4_0 in the grouped layout instead: gemm-avx2.c.)
#if defined(__AVX512BW__)
static inline __m256i block_q8(const uint8_t *w) { return _mm256_loadu_si256((const __m256i *)w); }
static inline __m256i block_q4(const uint8_t *w) {
  const __m128i q = _mm_loadu_si128((const __m128i *)w);
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
  return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}
#endif

#define MAXT 4

// One 4-row tile times nt_ (1..MAXT) tokens. q4 selects the Q4_0 decoding.
static inline void tile(const uint8_t *w, size_t rowBytes, const float *s, int nb, const int16_t *x, size_t xstride,
                        const float *xd, int xdstride, float *y, int ystride, int nt_, int q4) {
#if defined(__AVX512BW__)
  __m512 acc[4][MAXT];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < MAXT; t++) acc[r][t] = _mm512_setzero_ps();
  const size_t bb = q4 ? 16 : 32;
  int b = 0;
#if defined(__AVX512VNNI__)
  // Two blocks per vector with vpdpbusd (u8 x s8, 64 products per instruction): x is made
  // unsigned as x + 128 and 128 * sum(w) (per 4 weights, from vpdpbusd with ones) is taken
  // back off; lanes 0-7 hold block b, lanes 8-15 block b + 1, scaled by a vector of the pair.
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  for (; b + 2 <= nb; b += 2) {
    __m512i xu[MAXT];
    __m512 dx2[MAXT];
    for (int t = 0; t < MAXT; t++) {
      if (t < nt_) {
        const int16_t *xb = x + t * xstride + 32 * (size_t)b;
        const __m256i lo = _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)xb));
        const __m256i hi = _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)(xb + 32)));
        xu[t] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
        dx2[t] = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(xd[t * xdstride + b]), _mm512_set1_ps(xd[t * xdstride + b + 1]));
      }
    }
    for (int r = 0; r < 4; r++) {
      const uint8_t *wb = w + r * rowBytes + bb * b;
      const __m512i wv = q4 ? _mm512_inserti64x4(_mm512_castsi256_si512(block_q4(wb)), block_q4(wb + 16), 1) : _mm512_loadu_si512((const void *)wb);
      const __m512i corr = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, wv), 7);
      const __m512 sr = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(s[4 * b + r]), _mm512_set1_ps(s[4 * (b + 1) + r]));
      for (int t = 0; t < MAXT; t++) {
        if (t < nt_) {
          const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xu[t], wv), corr);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sr, dx2[t]), acc[r][t]);
        }
      }
    }
  }
#endif
  for (; b < nb; b++) {
    __m512i xv[MAXT];
    float dx[MAXT];
    for (int t = 0; t < MAXT; t++) {
      if (t < nt_) {
        xv[t] = _mm512_loadu_si512((const void *)(x + t * xstride + 32 * (size_t)b));
        dx[t] = xd[t * xdstride + b];
      }
    }
    for (int r = 0; r < 4; r++) {
      const uint8_t *wb = w + r * rowBytes + bb * b;
      const __m512i wv = _mm512_cvtepi8_epi16(q4 ? block_q4(wb) : block_q8(wb));
      const float sr = s[4 * b + r];
      for (int t = 0; t < MAXT; t++) {
        if (t < nt_) {
          const __m512 p = _mm512_cvtepi32_ps(_mm512_madd_epi16(wv, xv[t]));
          acc[r][t] = _mm512_fmadd_ps(p, _mm512_set1_ps(sr * dx[t]), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < nt_; t++)
    for (int r = 0; r < 4; r++) y[t * ystride + r] = _mm512_reduce_add_ps(acc[r][t]);
#else
  // (scalar: a build without AVX-512 or AVX2, which the loader does not take)
  for (int t = 0; t < nt_; t++)
    for (int r = 0; r < 4; r++) {
      float sum = 0;
      for (int b = 0; b < nb; b++) {
        int32_t si = 0;
        for (int i = 0; i < 32; i++) {
          int q;
          if (q4) {
            const uint8_t v = w[r * rowBytes + 16 * (size_t)b + (i & 15)];
            q = (i < 16 ? (v & 15) : (v >> 4)) - 8;
          } else {
            q = (int8_t)w[r * rowBytes + 32 * (size_t)b + i];
          }
          si += q * x[t * xstride + 32 * (size_t)b + i];
        }
        sum += (float)si * (s[4 * b + r] * xd[t * xdstride + b]);
      }
      y[t * ystride + r] = sum;
    }
#endif
}

static void mm(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, int n, uint32_t y,
               int ystride, int tiles, int tid, int nt, int q4) {
  (void)tid;
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const size_t rowBytes = q4 ? (size_t)cols / 2 : (size_t)cols;
  tk_claims claims = claims_open(base, tiles, nt);
  int t0, t1;
  while (claims_take(&claims, &t0, &t1))
    for (int tl = t0; tl < t1; tl++) {
      const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
      const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
      for (int t = 0; t < n; t += MAXT) {
        const int k = n - t < MAXT ? n - t : MAXT;
        tile(w, rowBytes, s, nb, (const int16_t *)(m + x16) + (size_t)t * cols, (size_t)cols, (const float *)(m + xd) + (size_t)t * nb, nb,
             (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl, ystride, k, q4);
      }
    }
}

void tk_mm_q8_0(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y,
                int ystride, int tiles, int tid, int nt) {
  (void)xs;
  mm(base, wq, ws, cols, x16, xd, n, y, ystride, tiles, tid, nt, 0);
}

void tk_mm_q4_0(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y,
                int ystride, int tiles, int tid, int nt) {
  (void)xs;
  mm(base, wq, ws, cols, x16, xd, n, y, ystride, tiles, tid, nt, 1);
}

// K-quants: kquant.c (tk_mm_kv) and kquant-gemm.c (tk_mm_kt).
#if defined(__AVX512BW__)
// ---- F32 / F16 / BF16 weights times f32 activations (already rounded to the dot type) -------
// type: 0 F32, 1 F16, 30 BF16; rows [rowsPad, cols] raw; one 4-row tile times each token.
static inline __m512 load_w16(int type, const uint8_t *p) {
  if (type == 0) return _mm512_loadu_ps((const float *)p);
  const __m256i h = _mm256_loadu_si256((const __m256i *)p);
  if (type == 1) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline float load_w1(int type, const uint8_t *p) {
  if (type == 0) return *(const float *)p;
  const uint16_t h = rd16(p);
  if (type == 1) return f16(h);
  union { uint32_t u; float f; } v;
  v.u = (uint32_t)h << 16;
  return v.f;
}

void tk_mm_float(uintptr_t base, int type, uint32_t w, int cols, uint32_t x, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const size_t es = type == 0 ? 4 : 2;
  const size_t rowBytes = (size_t)cols * es;
  const int c16 = cols & ~15;
  const int t0 = part(tiles, tid, nt);
  const int t1 = part(tiles, tid + 1, nt);
  for (int tl = t0; tl < t1; tl++) {
    const uint8_t *w0 = m + w + (size_t)tl * 4 * rowBytes;
    for (int t = 0; t < n; t++) {
      const float *xt = (const float *)(m + x) + (size_t)t * cols;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
      for (int c = 0; c < c16; c += 16) {
        const __m512 xv = _mm512_loadu_ps(xt + c);
        const uint8_t *wc = w0 + (size_t)c * es;
        a0 = _mm512_fmadd_ps(load_w16(type, wc), xv, a0);
        a1 = _mm512_fmadd_ps(load_w16(type, wc + rowBytes), xv, a1);
        a2 = _mm512_fmadd_ps(load_w16(type, wc + 2 * rowBytes), xv, a2);
        a3 = _mm512_fmadd_ps(load_w16(type, wc + 3 * rowBytes), xv, a3);
      }
      float r[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2), _mm512_reduce_add_ps(a3)};
      for (int c = c16; c < cols; c++)
        for (int k = 0; k < 4; k++) r[k] += load_w1(type, w0 + k * rowBytes + (size_t)c * es) * xt[c];
      float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
      for (int k = 0; k < 4; k++) yt[k] = r[k];
    }
  }
}
#endif
