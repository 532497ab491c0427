// Native-only GEMM kernels for AVX-512 VNNI (Q8_0 decode and prefill, K-quant prefill); see
// docs/kernels.md. Layouts of the repacked Q8_0 weights: kernels.c.
#include "common.h"

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

// One block pair of T tokens into acc (tile_q8v1's products and scales).
#define Q8V_PAIR(acc)                                                                                                       \
  do {                                                                                                                      \
    _mm_prefetch((const char *)(wr + 32 * (size_t)b) + PREFETCH, _MM_HINT_T0);                                             \
    const __m512i wv = _mm512_loadu_si512((const void *)(wr + 32 * (size_t)b));                                             \
    const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));                                        \
    const __m512 sw = _mm512_permutexvar_ps(dsel, _mm512_castps128_ps512(_mm_set_ps(0, 0, s[4 * (b + 1) + r], s[4 * b + r]))); \
    for (int t = 0; t < T; t++) {                                                                                           \
      const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + t * xstride + 32 * (size_t)b)), wv); \
      const __m512 dxv = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(dx + (size_t)t * dxstride + b)))); \
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw, _mm512_permutexvar_ps(dsel, dxv)), acc[t]);         \
    }                                                                                                                       \
    b += 2;                                                                                                                 \
  } while (0)

// T (1..8) tokens, each with tile_q8v1's arithmetic (two accumulators alternating over the
// block pairs, the same scales and tail): every token's outputs are bit for bit those of
// tile_q8v1 on it alone, whatever T is, while each row is streamed once for all T.
static inline __attribute__((always_inline)) void tile_q8vn(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, size_t xstride,
                                                            const float *dx, int dxstride, float *y, int ystride, const int T) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i k128 = _mm512_set1_epi8((char)0x80);
  const __m512i dsel = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const int np = nb / 2;
  for (int r = 0; r < 4; r++) {
    const uint8_t *wr = w + r * rowBytes;
    __m512 acc0[8], acc1[8];
    for (int t = 0; t < T; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
    int b = 0;
    // pairs 0, 2, 4, ... into acc0 and 1, 3, 5, ... into acc1, as tile_q8v1's `i & 1`
    for (int i = 0; i + 1 < np; i += 2) {
      Q8V_PAIR(acc0);
      Q8V_PAIR(acc1);
    }
    if (np & 1) Q8V_PAIR(acc0);
    if (b < nb) {
      const __m512i wv = _mm512_maskz_loadu_epi8(0xffffffffULL, wr + 32 * (size_t)b);
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));
      for (int t = 0; t < T; t++) {
        const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + t * xstride + 32 * (size_t)b)), wv);
        acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_maskz_mov_ps(0xff, _mm512_set1_ps(s[4 * b + r] * dx[(size_t)t * dxstride + b])), acc0[t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * ystride + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
  }
}
#undef Q8V_PAIR

// n tokens (any n; the matmul takes it below GEMM_TOKENS, matvecRows at any n): token t's
// outputs are bit for bit those of n = 1 on x_t alone, so a token's bits do not depend on the
// batch it runs in; each weight row is read once per run of up to 8 tokens.
void tk_mm_q8v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  const size_t rowBytes = (size_t)cols;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++) {
    const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
    const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
    for (int t = 0; t < n; t += 8) {
      const uint8_t *xt = m + xu + (size_t)t * cp;
      const float *dt = (const float *)(m + dx) + (size_t)t * nbp;
      float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
      switch (n - t < 8 ? n - t : 8) {
        case 1: tile_q8v1(w, rowBytes, s, nb, xt, dt, yt); break;
        case 2: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 2); break;
        case 3: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 3); break;
        case 4: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 4); break;
        case 5: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 5); break;
        case 6: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 6); break;
        case 7: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 7); break;
        default: tile_q8vn(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 8); break;
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

// A prefill GEMM and one-token rows in one pass over the weights: tokens 0..n-1 as tk_mm_q8t
// (xt, dxt from tk_q8t_prep; n >= GEMM_TOKENS), then d more tokens (xu, dx from tk_q8_prep)
// each as tk_mm_q8v, over each 8-row tile while it is still in cache. Token n + t's outputs go
// to row n + t of y and are bit for bit those of tk_mm_q8v on it alone; rows 0..n-1 those of
// tk_mm_q8t. So decode steps of other sequences ride along a prefill without streaming the
// weights a second time.
void tk_mm_q8tv(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t xu, uint32_t dx, int d, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  const int groups = (n + 14) / 15;
  const size_t rowBytes = (size_t)cols;
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
    for (int h = 0; h < R / 4; h++) {
      const int tl = 2 * pr + h;
      const uint8_t *wt = m + wq + (size_t)tl * 4 * rowBytes;
      const float *st = (const float *)(m + ws) + (size_t)tl * nb * 4;
      for (int t = 0; t < d; t += 8) {
        const uint8_t *xv = m + xu + (size_t)t * cp;
        const float *dv = (const float *)(m + dx) + (size_t)t * nbp;
        float *yv = (float *)(m + y) + (size_t)(n + t) * ystride + 4 * (size_t)tl;
        switch (d - t < 8 ? d - t : 8) {
          case 1: tile_q8v1(wt, rowBytes, st, nb, xv, dv, yv); break;
          case 2: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 2); break;
          case 3: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 3); break;
          case 4: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 4); break;
          case 5: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 5); break;
          case 6: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 6); break;
          case 7: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 7); break;
          default: tile_q8vn(wt, rowBytes, st, nb, xv, cp, dv, nbp, yv, ystride, 8); break;
        }
      }
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
