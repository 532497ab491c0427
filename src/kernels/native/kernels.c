// Native twins of the WebAssembly matmul kernels (src/kernels/wasm/matmul-q8.ts), compiled on
// the user's machine with -O3 -march=native when a C compiler is present and called through
// koffi. They work in place on a WebAssembly memory: `base` is the address of the memory's
// first byte and every other pointer argument is a byte offset into it, with the same layouts
// as the wasm kernels (quants [rowsPad, rowBytes], scales [rowsPad/4, nb, 4] f32,
// x16 [n, cols] i16, xd/xs [n, nb], y [n, ystride] f32). Each thread computes tiles
// [part(tiles, tid), part(tiles, tid + 1)).
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

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

static inline int part(int total, int tid, int nt) { return (int)(((int64_t)total * tid) / nt); }

// Q8_0 / Q4_0 weights of one block of 32 as 32 signed 8-bit values in element order.
#if defined(__AVX512BW__) || defined(__AVX2__)
static inline __m256i block_q8(const uint8_t *w) { return _mm256_loadu_si256((const __m256i *)w); }
static inline __m256i block_q4(const uint8_t *w) {
  const __m128i q = _mm_loadu_si128((const __m128i *)w);
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
  return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}
#endif

#define MAXT 4
// Bytes ahead of a streamed weight row to prefetch (measured: 2-8 KiB all reach DRAM bandwidth).
#define PREFETCH 4096

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
#elif defined(__AVX2__)
  __m256 acc[4][MAXT];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < MAXT; t++) acc[r][t] = _mm256_setzero_ps();
  const size_t bb = q4 ? 16 : 32;
  for (int b = 0; b < nb; b++) {
    for (int r = 0; r < 4; r++) {
      const uint8_t *wb = w + r * rowBytes + bb * b;
      const __m256i q = q4 ? block_q4(wb) : block_q8(wb);
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
      const float sr = s[4 * b + r];
      for (int t = 0; t < MAXT; t++) {
        if (t < nt_) {
          const int16_t *xb = x + t * xstride + 32 * (size_t)b;
          const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)xb)),
                                             _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(xb + 16))));
          const __m256 sc = _mm256_set1_ps(sr * xd[t * xdstride + b]);
#if defined(__FMA__)
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[r][t]);
#else
          acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_mul_ps(_mm256_cvtepi32_ps(p), sc));
#endif
        }
      }
    }
  }
  for (int t = 0; t < nt_; t++)
    for (int r = 0; r < 4; r++) {
      __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[r][t]), _mm256_extractf128_ps(acc[r][t], 1));
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
      y[t * ystride + r] = _mm_cvtss_f32(v);
    }
#else
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
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const size_t rowBytes = q4 ? (size_t)cols / 2 : (size_t)cols;
  const int t0 = part(tiles, tid, nt);
  const int t1 = part(tiles, tid + 1, nt);
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

// ---- K-quants (raw ggml super-blocks of 256) times q8_K activations, AVX-512 only ----------
// Each row's super-block is unpacked once into 8 vectors of 32 i16 weights with the integer
// sub-block scales already multiplied in (|q * scale| < 2^15), then dotted with every token:
// exact integer sums, as in the wasm kernels and llama.cpp's vec_dot_*_q8_K.
#if defined(__AVX512BW__)
static inline float f16(uint16_t h) {
  union { uint32_t u; float f; } a, m;
  a.u = (uint32_t)(h & 0x7fff) << 13;
  m.u = 0x77800000u; // 2^112
  const float v = a.f * m.f;
  return (h & 0x8000) ? -v : v;
}

// f32 -> nearest f16 value (round to nearest even), as f32.
static inline float round_f16(float v) { return _cvtsh_ss(_cvtss_sh(v, 0)); }

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline __m512i pair16(int a, int b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)a)), _mm256_set1_epi16((short)b), 1);
}

// Q4_K / Q5_K: wv[i] = sub-block i times its scale; mins into mn.
static inline void unpack_q4k(const uint8_t *p, int five, __m512i wv[8], uint8_t mn[8]) {
  const uint8_t *q = p + 4;
  uint8_t sc[8];
  for (int j = 0; j < 4; j++) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
    sc[j + 4] = (uint8_t)((q[j + 8] & 0xf) | ((q[j] >> 6) << 4));
    mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
  }
  const uint8_t *qs = p + (five ? 48 : 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
  for (int j = 0; j < 4; j++) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
    }
    wv[2 * j] = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(lo), _mm512_set1_epi16(sc[2 * j]));
    wv[2 * j + 1] = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(hi), _mm512_set1_epi16(sc[2 * j + 1]));
  }
}

// Q6_K: wv[4h + k] = elements 128h + 32k .. +31 (two 16-groups) times their int8 scales.
static inline void unpack_q6k(const uint8_t *p, __m512i wv[8]) {
  const int8_t *sc = (const int8_t *)(p + 192);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; h++) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
    for (int k = 0; k < 4; k++) {
      const int g = 8 * h + 2 * k;
      wv[4 * h + k] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_sub_epi8(q[k], k32)), pair16(sc[g], sc[g + 1]));
    }
  }
}

static inline __m512i dot8(const __m512i wv[8], const int16_t *x) {
  __m512i s = _mm512_madd_epi16(wv[0], _mm512_loadu_si512((const void *)x));
  for (int i = 1; i < 8; i++) s = _mm512_add_epi32(s, _mm512_madd_epi16(wv[i], _mm512_loadu_si512((const void *)(x + 32 * i))));
  return s;
}

void tk_mm_k(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y,
             int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const int ng = cols / 32;
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  const int r0 = part(tiles, tid, nt) * 4;
  const int r1 = part(tiles, tid + 1, nt) * 4;
  const int16_t *X = (const int16_t *)(m + x16);
  const float *XD = (const float *)(m + xd);
  const int32_t *XS = (const int32_t *)(m + xs);
  float *Y = (float *)(m + y);
  for (int r = r0; r < r1; r++) {
    const uint8_t *wr = m + w + (size_t)r * rowBytes;
    for (int t0 = 0; t0 < n; t0 += MAXT) {
      const int T = n - t0 < MAXT ? n - t0 : MAXT;
      __m512 acc[MAXT];
      float mins[MAXT];
      for (int t = 0; t < MAXT; t++) {
        acc[t] = _mm512_setzero_ps();
        mins[t] = 0;
      }
      for (int b = 0; b < nb; b++) {
        const uint8_t *p = wr + (size_t)b * bytes;
        if (T == 1)
          for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PREFETCH + o, _MM_HINT_T0);
        __m512i wv[8];
        uint8_t mn[8];
        float d, dmin = 0;
        if (type == 14) {
          unpack_q6k(p, wv);
          d = f16(rd16(p + 208));
        } else {
          unpack_q4k(p, type == 13, wv, mn);
          d = f16(rd16(p));
          dmin = f16(rd16(p + 2));
        }
        for (int t = 0; t < T; t++) {
          const int tt = t0 + t;
          const float dx = XD[(size_t)tt * nb + b];
          const __m512i s = dot8(wv, X + (size_t)tt * cols + 256 * (size_t)b);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * dx), acc[t]);
          if (type != 14) {
            const int32_t *g = XS + (size_t)tt * ng + 8 * (size_t)b;
            int32_t summ = 0;
            for (int j = 0; j < 8; j++) summ += mn[j] * g[j];
            mins[t] += dmin * dx * (float)summ;
          }
        }
      }
      for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ystride + r] = _mm512_reduce_add_ps(acc[t]) - mins[t];
    }
  }
}

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

// ---- AVX-512 VNNI Q8_0: activations quantised once per matmul, 4 rows x up to 4 tokens ----
// tk_q8_prep quantises x [n, cols] f32 exactly as quant_q8_0 (wasm) and llama.cpp do (d =
// f16(amax / 127), q = nearest-even(x * 127 / amax)) and stores q + 128 as u8: xu [n, cp]
// (cp = cols rounded up to 64 elements, padding q = 0) and d: dx [n, nbp] f32 (nbp = cp / 32,
// padding 0). tk_mm_q8v multiplies by the repacked Q8_0 weights (layout at the top): per pair
// of blocks one vpdpbusd of (q + 128) by w per row and token, from which 128 * sum(w) (once per
// row) is taken back off; lanes 0-7 hold block b, 8-15 block b + 1, scaled by s_row * d_x.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
int tk_vnni512(void) { return 1; }

void tk_q8_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xu, uint32_t dx, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m128i flip = _mm_set1_epi8((char)0x80);
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *xt = (const float *)(m + x) + (size_t)t * cols;
    uint8_t *q = m + xu + (size_t)t * cp;
    float *d = (float *)(m + dx) + (size_t)t * nbp;
    for (int b = 0; b < nb; b++) {
      const __m512 a = _mm512_loadu_ps(xt + 32 * (size_t)b);
      const __m512 c = _mm512_loadu_ps(xt + 32 * (size_t)b + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absmask), _mm512_and_ps(c, absmask)));
      d[b] = round_f16(amax / 127.0f);
      const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
      const __m512i qa = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i qc = _mm512_cvt_roundps_epi32(_mm512_mul_ps(c, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128((__m128i *)(q + 32 * (size_t)b), _mm_xor_si128(_mm512_cvtsepi32_epi8(qa), flip));
      _mm_storeu_si128((__m128i *)(q + 32 * (size_t)b + 16), _mm_xor_si128(_mm512_cvtsepi32_epi8(qc), flip));
    }
    for (int b = nb; b < nbp; b++) {
      d[b] = 0;
      for (int i = 0; i < 32; i++) q[32 * (size_t)b + i] = 0x80;
    }
  }
}

static inline __attribute__((always_inline)) void tile_q8v(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, size_t xstride,
                                                           const float *dx, int dxstride, float *y, int ystride, const int T) {
  __m512 acc[4][4];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < 4; t++) acc[r][t] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m512i k128 = _mm512_set1_epi8((char)0x80);
  const __m512i dsel = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i sel[4];
  for (int r = 0; r < 4; r++) sel[r] = _mm512_add_epi32(_mm512_set1_epi32(r), _mm512_slli_epi32(dsel, 2));
  for (int b = 0; b < nb; b += 2) {
    const int tail = b + 1 == nb;
    const __m512 sv = tail ? _mm512_maskz_loadu_ps(0x0f, s + 4 * (size_t)b) : _mm512_castps256_ps512(_mm256_loadu_ps(s + 4 * (size_t)b));
    __m512 dx2[4];
    for (int t = 0; t < T; t++) dx2[t] = _mm512_permutexvar_ps(dsel, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(dx + (size_t)t * dxstride + b)))));
    for (int r = 0; r < 4; r++) {
      const uint8_t *wb = w + r * rowBytes + 32 * (size_t)b;
      const __m512i wv = tail ? _mm512_maskz_loadu_epi8(0xffffffffULL, wb) : _mm512_loadu_si512((const void *)wb);
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));
      const __m512 sr = _mm512_permutexvar_ps(sel[r], sv);
      for (int t = 0; t < T; t++) {
        const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + t * xstride + 32 * (size_t)b)), wv);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sr, dx2[t]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; t++)
    for (int r = 0; r < 4; r++) y[t * ystride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// One token: the tile's rows one after another, so the weights are read as one sequential
// stream (four interleaved row streams measured slower against DRAM bandwidth).
static void tile_q8v1(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, const float *dx, float *y) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i k128 = _mm512_set1_epi8((char)0x80);
  const __m512i dsel = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const int np = nb / 2;
  for (int r = 0; r < 4; r++) {
    const uint8_t *wr = w + r * rowBytes;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int b = 0;
    for (int i = 0; i < np; i++, b += 2) {
      // Far software prefetch: without it one core reads ~25% below the memory's bandwidth here.
      _mm_prefetch((const char *)(wr + 32 * (size_t)b) + PREFETCH, _MM_HINT_T0);
      const __m512i wv = _mm512_loadu_si512((const void *)(wr + 32 * (size_t)b));
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));
      const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + 32 * (size_t)b)), wv);
      const __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(dsel, _mm512_castps128_ps512(_mm_set_ps(0, 0, s[4 * (b + 1) + r], s[4 * b + r]))),
                                      _mm512_permutexvar_ps(dsel, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(dx + b))))));
      if (i & 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc1);
      else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc0);
    }
    if (b < nb) {
      const __m512i wv = _mm512_maskz_loadu_epi8(0xffffffffULL, wr + 32 * (size_t)b);
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));
      const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + 32 * (size_t)b)), wv);
      acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_maskz_mov_ps(0xff, _mm512_set1_ps(s[4 * b + r] * dx[b])), acc0);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

void tk_mm_q8v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  const size_t rowBytes = (size_t)cols;
  const int t0 = part(tiles, tid, nt);
  const int t1 = part(tiles, tid + 1, nt);
  for (int tl = t0; tl < t1; tl++) {
    const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
    const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
    for (int t = 0; t < n; t += 4) {
      const uint8_t *xt = m + xu + (size_t)t * cp;
      const float *dt = (const float *)(m + dx) + (size_t)t * nbp;
      float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
      switch (n - t < 4 ? n - t : 4) {
        case 1: tile_q8v1(w, rowBytes, s, nb, xt, dt, yt); break;
        case 2: tile_q8v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 2); break;
        case 3: tile_q8v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 3); break;
        default: tile_q8v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 4); break;
      }
    }
  }
}

// Prefill GEMM with tokens across the lanes: xt [G][cols/4][16][4] u8 holds, per group of 15
// tokens, 4 consecutive (q + 128) quants of each token in lanes 0-14 and of a zero token in
// lane 15 (tokens past n are zero tokens too); dxt [G][nb][16] f32 their block scales (0 for
// zero tokens). One vpdpbusd with 4 weight bytes broadcast then advances 15 tokens at once;
// lane 15 comes out as 128 * sum(w) of the block, the correction every lane takes off.
void tk_q8t_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xt, uint32_t dxt, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int groups = (n + 14) / 15;
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m128i flip = _mm_set1_epi8((char)0x80);
  for (int g = part(groups, tid, nt); g < part(groups, tid + 1, nt); g++) {
    uint32_t *X = (uint32_t *)(m + xt + (size_t)g * cols * 16);
    float *D = (float *)(m + dxt) + (size_t)g * nb * 16;
    for (int lane = 0; lane < 16; lane++) {
      const int t = g * 15 + lane;
      if (lane == 15 || t >= n) {
        for (int k = 0; k < cols / 4; k++) X[16 * (size_t)k + lane] = 0x80808080u;
        for (int b = 0; b < nb; b++) D[16 * b + lane] = 0;
        continue;
      }
      const float *xr = (const float *)(m + x) + (size_t)t * cols;
      for (int b = 0; b < nb; b++) {
        const __m512 a = _mm512_loadu_ps(xr + 32 * (size_t)b);
        const __m512 c = _mm512_loadu_ps(xr + 32 * (size_t)b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absmask), _mm512_and_ps(c, absmask)));
        D[16 * b + lane] = round_f16(amax / 127.0f);
        const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
        uint32_t q[8];
        _mm_storeu_si128((__m128i *)q, _mm_xor_si128(_mm512_cvtsepi32_epi8(_mm512_cvt_roundps_epi32(_mm512_mul_ps(a, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), flip));
        _mm_storeu_si128((__m128i *)(q + 4), _mm_xor_si128(_mm512_cvtsepi32_epi8(_mm512_cvt_roundps_epi32(_mm512_mul_ps(c, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), flip));
        for (int j = 0; j < 8; j++) X[16 * (size_t)(8 * b + j) + lane] = q[j];
      }
    }
  }
}

// R rows (R / 4 scale tiles) by one group of 15 tokens.
static inline __attribute__((always_inline)) void gemm_q8t(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *X, const float *D, float *y,
                                                           int ystride, int tokens, const int R) {
  __m512 acc[8];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  const __m512i last = _mm512_set1_epi32(15);
  for (int b = 0; b < nb; b++) {
    __m512i xv[8];
    for (int j = 0; j < 8; j++) xv[j] = _mm512_loadu_si512((const void *)(X + 64 * (size_t)(8 * b + j)));
    const __m512 dv = _mm512_loadu_ps(D + 16 * (size_t)b);
    for (int r = 0; r < R; r++) {
      const int32_t *wr = (const int32_t *)(w + r * rowBytes + 32 * (size_t)b);
      __m512i a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv[0], _mm512_set1_epi32(wr[0]));
      __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv[1], _mm512_set1_epi32(wr[1]));
      a0 = _mm512_dpbusd_epi32(a0, xv[2], _mm512_set1_epi32(wr[2]));
      a1 = _mm512_dpbusd_epi32(a1, xv[3], _mm512_set1_epi32(wr[3]));
      a0 = _mm512_dpbusd_epi32(a0, xv[4], _mm512_set1_epi32(wr[4]));
      a1 = _mm512_dpbusd_epi32(a1, xv[5], _mm512_set1_epi32(wr[5]));
      a0 = _mm512_dpbusd_epi32(a0, xv[6], _mm512_set1_epi32(wr[6]));
      a1 = _mm512_dpbusd_epi32(a1, xv[7], _mm512_set1_epi32(wr[7]));
      const __m512i ai = _mm512_add_epi32(a0, a1);
      const __m512i p = _mm512_sub_epi32(ai, _mm512_permutexvar_epi32(last, ai));
      const float sr = s[(size_t)(r >> 2) * nb * 4 + 4 * (size_t)b + (r & 3)];
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_set1_ps(sr)), acc[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float o[16];
    _mm512_storeu_ps(o, acc[r]);
    for (int t = 0; t < tokens; t++) y[(size_t)t * ystride + r] = o[t];
  }
}

void tk_mm_q8t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int groups = (n + 14) / 15;
  const size_t rowBytes = (size_t)cols;
  // Thread shares in pairs of tiles (8 rows); the odd last tile goes to the last thread.
  const int pairs = tiles / 2;
  const int p0 = part(pairs, tid, nt);
  const int p1 = part(pairs, tid + 1, nt);
  for (int pr = p0; pr <= p1; pr++) {
    const int R = pr < p1 ? 8 : (tid == nt - 1 && (tiles & 1) ? 4 : 0);
    if (R == 0) break;
    const uint8_t *w = m + wq + (size_t)pr * 8 * rowBytes;
    const float *s = (const float *)(m + ws) + (size_t)pr * 2 * nb * 4;
    for (int g = 0; g < groups; g++) {
      const int tokens = n - 15 * g < 15 ? n - 15 * g : 15;
      const uint8_t *X = m + xt + (size_t)g * cols * 16;
      const float *D = (const float *)(m + dxt) + (size_t)g * nb * 16;
      float *yt = (float *)(m + y) + (size_t)g * 15 * ystride + 8 * (size_t)pr;
      if (R == 8) gemm_q8t(w, rowBytes, s, nb, X, D, yt, ystride, tokens, 8);
      else gemm_q8t(w, rowBytes, s, nb, X, D, yt, ystride, tokens, 4);
    }
  }
}

// ---- K-quant prefill GEMM (tokens across the lanes, as mm_q8t) ------------------------------
// tk_kt_prep transposes the q8_K activations of quant_q8_k (x16 [n, cols] i16, xd [n, nb] f32,
// xs [n, cols/32] i32 sums) into groups of 15 tokens + a zero token: xt [G][cols/4][16] u32
// (q + 128), dxt [G][nb][16] f32, bst [G][cols/32][16] f32 (the sums, exact in f32).
void tk_kt_prep(uintptr_t base, uint32_t x16, uint32_t xd, uint32_t xs, int n, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const int ng = cols / 32;
  const int groups = (n + 14) / 15;
  for (int g = part(groups, tid, nt); g < part(groups, tid + 1, nt); g++) {
    uint32_t *X = (uint32_t *)(m + xt + (size_t)g * cols * 16);
    float *D = (float *)(m + dxt) + (size_t)g * nb * 16;
    float *B = (float *)(m + bst) + (size_t)g * ng * 16;
    for (int lane = 0; lane < 16; lane++) {
      const int t = g * 15 + lane;
      if (lane == 15 || t >= n) {
        for (int k = 0; k < cols / 4; k++) X[16 * (size_t)k + lane] = 0x80808080u;
        for (int b = 0; b < nb; b++) D[16 * b + lane] = 0;
        for (int j = 0; j < ng; j++) B[16 * j + lane] = 0;
        continue;
      }
      const int16_t *q = (const int16_t *)(m + x16) + (size_t)t * cols;
      for (int k = 0; k < cols / 4; k++) {
        const uint32_t b0 = (uint8_t)(q[4 * k] + 128), b1 = (uint8_t)(q[4 * k + 1] + 128), b2 = (uint8_t)(q[4 * k + 2] + 128), b3 = (uint8_t)(q[4 * k + 3] + 128);
        X[16 * (size_t)k + lane] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
      }
      for (int b = 0; b < nb; b++) D[16 * b + lane] = ((const float *)(m + xd))[(size_t)t * nb + b];
      for (int j = 0; j < ng; j++) B[16 * j + lane] = (float)((const int32_t *)(m + xs))[(size_t)t * ng + j];
    }
  }
}

// One row unpacked: q [cols] i8, sc [cols/16] i32 (scale of each 16 elements), mn [cols/32]
// f32 (Q4_K/Q5_K mins, 0 for Q6_K), d / dmin [nb] f32.
typedef struct {
  int8_t *q;
  int32_t *sc;
  float *mn;
  float *d;
  float *dmin;
} krow;

static void unpack_krow(int type, const uint8_t *w, int nb, krow r) {
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  for (int b = 0; b < nb; b++) {
    const uint8_t *p = w + (size_t)b * bytes;
    int8_t *q = r.q + 256 * (size_t)b;
    if (type == 14) {
      for (int h = 0; h < 2; h++) {
        const uint8_t *ql = p + 64 * h;
        const uint8_t *qh = p + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
          q[128 * h + l] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
          q[128 * h + 32 + l] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
          q[128 * h + 64 + l] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          q[128 * h + 96 + l] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
      for (int s = 0; s < 16; s++) r.sc[16 * b + s] = ((const int8_t *)(p + 192))[s];
      for (int j = 0; j < 8; j++) r.mn[8 * b + j] = 0;
      r.d[b] = f16(rd16(p + 208));
      r.dmin[b] = 0;
    } else {
      const uint8_t *sq = p + 4;
      for (int j = 0; j < 4; j++) {
        const int s0 = sq[j] & 63, m0 = sq[j + 4] & 63;
        const int s1 = (sq[j + 8] & 0xf) | ((sq[j] >> 6) << 4), m1 = (sq[j + 8] >> 4) | ((sq[j + 4] >> 6) << 4);
        r.sc[16 * b + 2 * j] = r.sc[16 * b + 2 * j + 1] = s0;
        r.sc[16 * b + 8 + 2 * j] = r.sc[16 * b + 8 + 2 * j + 1] = s1;
        r.mn[8 * b + j] = (float)m0;
        r.mn[8 * b + j + 4] = (float)m1;
      }
      const int five = type == 13;
      const uint8_t *qs = p + (five ? 48 : 16);
      const uint8_t *qh = p + 16;
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
          int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
          if (five) {
            lo |= ((qh[l] >> (2 * j)) & 1) << 4;
            hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
          }
          q[64 * j + l] = (int8_t)lo;
          q[64 * j + 32 + l] = (int8_t)hi;
        }
      r.d[b] = f16(rd16(p));
      r.dmin[b] = f16(rd16(p + 2));
    }
  }
}

static inline __attribute__((always_inline)) void gemm_kt(const krow *rows, int nb, const uint8_t *X, const float *D, const float *B, float *y, int ystride, int tokens, const int R,
                                                          const int SUB) {
  const __m512i last = _mm512_set1_epi32(15);
  __m512 acc[8];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const __m512 dv = _mm512_loadu_ps(D + 16 * (size_t)b);
    for (int r = 0; r < R; r++) {
      const int32_t *wq = (const int32_t *)(rows[r].q + 256 * (size_t)b);
      const int32_t *sc = rows[r].sc + 16 * (size_t)b;
      __m512i ai = _mm512_setzero_si512();
      // Q4_K/Q5_K scales cover 32 elements (two 16s with one scale), Q6_K's 16.
      for (int s = 0; s < 16; s += SUB) {
        const uint8_t *xs = X + 64 * (size_t)(64 * b + 4 * s);
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)xs), _mm512_set1_epi32(wq[4 * s]));
        __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)(xs + 64)), _mm512_set1_epi32(wq[4 * s + 1]));
        p = _mm512_dpbusd_epi32(p, _mm512_loadu_si512((const void *)(xs + 128)), _mm512_set1_epi32(wq[4 * s + 2]));
        p1 = _mm512_dpbusd_epi32(p1, _mm512_loadu_si512((const void *)(xs + 192)), _mm512_set1_epi32(wq[4 * s + 3]));
        if (SUB == 2) {
          p = _mm512_dpbusd_epi32(p, _mm512_loadu_si512((const void *)(xs + 256)), _mm512_set1_epi32(wq[4 * s + 4]));
          p1 = _mm512_dpbusd_epi32(p1, _mm512_loadu_si512((const void *)(xs + 320)), _mm512_set1_epi32(wq[4 * s + 5]));
          p = _mm512_dpbusd_epi32(p, _mm512_loadu_si512((const void *)(xs + 384)), _mm512_set1_epi32(wq[4 * s + 6]));
          p1 = _mm512_dpbusd_epi32(p1, _mm512_loadu_si512((const void *)(xs + 448)), _mm512_set1_epi32(wq[4 * s + 7]));
        }
        p = _mm512_add_epi32(p, p1);
        p = _mm512_sub_epi32(p, _mm512_permutexvar_epi32(last, p));
        ai = _mm512_add_epi32(ai, _mm512_mullo_epi32(p, _mm512_set1_epi32(sc[s])));
      }
      __m512 mins = _mm512_setzero_ps();
      if (rows[r].dmin[b] != 0)
        for (int j = 0; j < 8; j++) mins = _mm512_fmadd_ps(_mm512_loadu_ps(B + 16 * (size_t)(8 * b + j)), _mm512_set1_ps(rows[r].mn[8 * b + j]), mins);
      const __m512 v = _mm512_fnmadd_ps(mins, _mm512_set1_ps(rows[r].dmin[b]), _mm512_mul_ps(_mm512_cvtepi32_ps(ai), _mm512_set1_ps(rows[r].d[b])));
      acc[r] = _mm512_fmadd_ps(v, dv, acc[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float o[16];
    _mm512_storeu_ps(o, acc[r]);
    for (int t = 0; t < tokens; t++) y[(size_t)t * ystride + r] = o[t];
  }
}

void tk_mm_kt(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int n, uint32_t y, int ystride, int tiles,
              int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const int groups = (n + 14) / 15;
  const int pairs = tiles / 2;
  const int p0 = part(pairs, tid, nt);
  const int p1 = part(pairs, tid + 1, nt);
  // Unpacked rows of one 8-row tile: q, sc, mn, d, dmin per row.
  const size_t per = (size_t)cols + (size_t)cols / 16 * 4 + (size_t)cols / 32 * 4 + (size_t)nb * 8;
  uint8_t *buf = (uint8_t *)malloc(8 * per + 64);
  if (!buf) return;
  krow rows[8];
  for (int r = 0; r < 8; r++) {
    uint8_t *b0 = buf + r * per;
    rows[r].q = (int8_t *)b0;
    rows[r].sc = (int32_t *)(b0 + cols);
    rows[r].mn = (float *)(b0 + cols + cols / 16 * 4);
    rows[r].d = (float *)(b0 + cols + cols / 16 * 4 + cols / 32 * 4);
    rows[r].dmin = rows[r].d + nb;
  }
  for (int pr = p0; pr <= p1; pr++) {
    const int R = pr < p1 ? 8 : (tid == nt - 1 && (tiles & 1) ? 4 : 0);
    if (R == 0) break;
    for (int r = 0; r < R; r++) unpack_krow(type, m + w + (size_t)(8 * pr + r) * rowBytes, nb, rows[r]);
    for (int g = 0; g < groups; g++) {
      const int tokens = n - 15 * g < 15 ? n - 15 * g : 15;
      const uint8_t *X = m + xt + (size_t)g * cols * 16;
      const float *D = (const float *)(m + dxt) + (size_t)g * nb * 16;
      const float *B = (const float *)(m + bst) + (size_t)g * (cols / 32) * 16;
      float *yt = (float *)(m + y) + (size_t)g * 15 * ystride + 8 * (size_t)pr;
      if (type == 14) {
        if (R == 8) gemm_kt(rows, nb, X, D, B, yt, ystride, tokens, 8, 1);
        else gemm_kt(rows, nb, X, D, B, yt, ystride, tokens, 4, 1);
      } else {
        if (R == 8) gemm_kt(rows, nb, X, D, B, yt, ystride, tokens, 8, 2);
        else gemm_kt(rows, nb, X, D, B, yt, ystride, tokens, 4, 2);
      }
    }
  }
  free(buf);
}
#else
int tk_vnni512(void) { return 0; }
#endif

// ---- Attention and SwiGLU (AVX-512), twins of attention.ts / swiglu in the wasm kernels ----
#if defined(__AVX512BW__)
#include <math.h>

// e^x for 16 lanes: Cephes' expf polynomial on x - n ln2, scaled by 2^n (max error ~2 ulp,
// like ggml's own vector expf that llama.cpp's softmax and SiLU use); 0 far below, inf above.
static inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.72283935546875f)), _mm512_set1_ps(-103.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

static inline __m512 load_kv(const uint8_t *p, int half, __mmask16 mk) {
  if (half) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, p));
  return _mm512_maskz_loadu_ps(mk, p);
}

static inline __m512 load_kv16(const uint8_t *p, int half) {
  return half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_ps((const float *)p);
}

// Softmax of scores[0..len) in place (max, e^(s - max) summed in f64 as llama.cpp); returns 1 / sum.
static inline float softmax_scores(float *scores, int len) {
  __m512 vmx = _mm512_set1_ps(-INFINITY);
  for (int p = 0; p < len; p += 16) {
    const __mmask16 mk = len - p >= 16 ? 0xffff : (__mmask16)((1u << (len - p)) - 1);
    vmx = _mm512_mask_max_ps(vmx, mk, vmx, _mm512_maskz_loadu_ps(mk, scores + p));
  }
  vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
  __m512d sum2 = _mm512_setzero_pd();
  for (int p = 0; p < len; p += 16) {
    const __mmask16 mk = len - p >= 16 ? 0xffff : (__mmask16)((1u << (len - p)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scores + p), vmx)));
    _mm512_mask_storeu_ps(scores + p, mk, e);
    sum2 = _mm512_add_pd(sum2, _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(e)), _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)))));
  }
  return (float)(1.0 / _mm512_reduce_add_pd(sum2));
}

// One (token, head) item with hd = 16 * NC: q and the output accumulators stay in registers.
static inline __attribute__((always_inline)) void att_item(const float *qo, const uint8_t *kb, const uint8_t *vb, size_t rowStride, int len, float scale,
                                                           int half, float *scores, float *oo, const int NC) {
  const size_t cs = half ? 32 : 64;
  __m512 qv[NC];
  for (int c = 0; c < NC; c++) {
    qv[c] = _mm512_loadu_ps(qo + 16 * c);
    if (half) qv[c] = _mm512_cvtph_ps(_mm512_cvtps_ph(qv[c], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (int p = 0; p < len; p++) {
    const uint8_t *kp = kb + (size_t)p * rowStride;
    __m512 acc = _mm512_mul_ps(qv[0], load_kv16(kp, half));
    for (int c = 1; c < NC; c++) acc = _mm512_fmadd_ps(qv[c], load_kv16(kp + c * cs, half), acc);
    scores[p] = _mm512_reduce_add_ps(acc) * scale;
  }
  const float inv = softmax_scores(scores, len);
  __m512 o[NC];
  for (int c = 0; c < NC; c++) o[c] = _mm512_setzero_ps();
  for (int p = 0; p < len; p++) {
    float pv = scores[p] * inv;
    if (half) pv = round_f16(pv);
    const __m512 pw = _mm512_set1_ps(pv);
    const uint8_t *vp = vb + (size_t)p * rowStride;
    for (int c = 0; c < NC; c++) o[c] = _mm512_fmadd_ps(pw, load_kv16(vp + c * cs, half), o[c]);
  }
  for (int c = 0; c < NC; c++) _mm512_storeu_ps(oo + 16 * c, o[c]);
}

// q, out: [n, heads, hd] f32; k, v: [maxSeq, kvHeads, hd] (f32, or f16 when half); scores:
// per-thread scratch of scratchStride bytes. One (token, head) pair per work item.
void tk_attention(uintptr_t base, uint32_t q, uint32_t k, uint32_t v, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads,
                  int hd, int pos0, float scale, int half, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int group = heads / kvHeads;
  const size_t es = half ? 2 : 4;
  const size_t rowStride = (size_t)kvHeads * hd * es;
  float *scores = (float *)(m + scratch + (size_t)tid * scratchStride);
  const int nc = (hd + 15) / 16;
  float qr[nc * 16];
  float oa[nc * 16];
  const int items = n * heads;
  for (int item = part(items, tid, nt); item < part(items, tid + 1, nt); item++) {
    const int t = item / heads;
    const int h = item % heads;
    const int len = pos0 + t + 1;
    const float *qo = (const float *)(m + q) + (size_t)item * hd;
    const size_t kvo = (size_t)(h / group) * hd * es;
    float *oo = (float *)(m + out) + (size_t)item * hd;
    if (hd == 64 || hd == 128) {
      if (hd == 64) att_item(qo, m + k + kvo, m + v + kvo, rowStride, len, scale, half, scores, oo, 4);
      else att_item(qo, m + k + kvo, m + v + kvo, rowStride, len, scale, half, scores, oo, 8);
      continue;
    }
    for (int i = 0; i < nc * 16; i++) qr[i] = i < hd ? (half ? round_f16(qo[i]) : qo[i]) : 0.0f;
    for (int p = 0; p < len; p++) {
      const uint8_t *kp = m + k + (size_t)p * rowStride + kvo;
      __m512 acc = _mm512_setzero_ps();
      for (int c = 0; c < nc; c++) {
        const __mmask16 mk = 16 * c + 16 <= hd ? 0xffff : (__mmask16)((1u << (hd - 16 * c)) - 1);
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 16 * c), load_kv(kp + 16 * (size_t)c * es, half, mk), acc);
      }
      scores[p] = _mm512_reduce_add_ps(acc) * scale;
    }
    const float inv = softmax_scores(scores, len);
    for (int i = 0; i < nc * 16; i++) oa[i] = 0;
    for (int p = 0; p < len; p++) {
      float pv = scores[p] * inv;
      if (half) pv = round_f16(pv);
      const __m512 pw = _mm512_set1_ps(pv);
      const uint8_t *vp = m + v + (size_t)p * rowStride + kvo;
      for (int c = 0; c < nc; c++) {
        const __mmask16 mk = 16 * c + 16 <= hd ? 0xffff : (__mmask16)((1u << (hd - 16 * c)) - 1);
        _mm512_storeu_ps(oa + 16 * c, _mm512_fmadd_ps(pw, load_kv(vp + 16 * (size_t)c * es, half, mk), _mm512_loadu_ps(oa + 16 * c)));
      }
    }
    for (int i = 0; i < hd; i++) oo[i] = oa[i];
  }
}

// RMSNorm bit-identical to rmsNormRef (ops-ref.ts): f32 squares summed in f64 in order, each
// step of the scale rounded to f32, then (x * scale) rounded before the weight multiplies
// it. No FMA contraction here. x, out: [n, dim] (out may be x); w: [dim]; tokens split.
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
    const __m512 scale = _mm512_set1_ps((float)(1.0 / (double)s));
    int i = 0;
    for (; i + 16 <= dim; i += 16) _mm512_storeu_ps(O + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(X + i), scale), _mm512_loadu_ps(W + i)));
    if (i < dim) {
      const __mmask16 mk = (__mmask16)((1u << (dim - i)) - 1);
      _mm512_mask_storeu_ps(O + i, mk, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, X + i), scale), _mm512_maskz_loadu_ps(mk, W + i)));
    }
  }
}

// RoPE in place, bit-identical to ropeRef: x [n, heads, hd]; cs [n, 2, half] f32 (cos then
// sin of each token's position, from the caller's angle table); neox pairs (i, i + half),
// else (2i, 2i + 1). Each product rounded to f32, the difference rounded once more (as JS
// does in f64). Tokens split across threads.
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

// out = silu(g) * u over count elements (out may alias g).
void tk_swiglu(uintptr_t base, uint32_t g, uint32_t u, uint32_t out, int count, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const float *G = (const float *)(m + g);
  const float *U = (const float *)(m + u);
  float *O = (float *)(m + out);
  const int i1 = part(count, tid + 1, nt);
  for (int i = part(count, tid, nt); i < i1; i += 16) {
    const __mmask16 mk = i1 - i >= 16 ? 0xffff : (__mmask16)((1u << (i1 - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(mk, G + i);
    const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    _mm512_mask_storeu_ps(O + i, mk, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mk, U + i)));
  }
}
#endif
