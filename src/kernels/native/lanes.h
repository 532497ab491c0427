// The Q8_0 lanes layout's GEMM (tokens across the vector lanes), shared by Q8_0
// (gemm-vnni.c) and Q4_0 (q4-vnni.c, on rows unpacked to it); layout: gemm-vnni.c.
#ifndef TANDEM_LANES_H
#define TANDEM_LANES_H
#include "common.h"

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// The next tile's bytes to fetch into L2 while this tile computes: pfLines cache lines from pf
// (weights) and sLines from ps (scales); none where pf is NULL.
struct tile_prefetch {
  const uint8_t *pf;
  size_t pfLines;
  const uint8_t *ps;
  size_t sLines;
};

// R rows (wr: R row pointers' base, rowBytes apart; sr: their scales) by one group of 16
// tokens. Block b's 4-byte word k of a row sits at (b >> 4) * 512 + 64 * k + 4 * (b & 15).
// With next.pf the pass also fetches the next tile, spread over the blocks, so that its first
// pass finds it in L2: a tile's first token group otherwise waits on memory, which a prompt
// piece of few groups (a mixed round's) cannot hide behind its other groups.
static inline __attribute__((always_inline)) void gemm_q8t(const uint8_t *w, size_t rowBytes, const uint16_t *s, size_t srow, int nb, const uint8_t *X, const float *D,
                                                           float *y, int ystride, int tokens, const int R, struct tile_prefetch next) {
  __m512 acc[8];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  const size_t per = next.pf ? (next.pfLines + nb - 1) / nb : 0;
  for (int b = 0; b < nb; b++) {
    for (size_t i = 0; i < per; i++) _mm_prefetch((const char *)next.pf + 64 * (per * b + i), _MM_HINT_T1);
    if (next.pf && (size_t)b < next.sLines) _mm_prefetch((const char *)next.ps + 64 * (size_t)b, _MM_HINT_T1);
    __m512i xv[8];
    for (int j = 0; j < 8; j++) xv[j] = _mm512_loadu_si512((const void *)(X + 64 * (size_t)(8 * b + j)));
    const __m512 dv = _mm512_loadu_ps(D + 32 * (size_t)b);
    const __m512i cv = _mm512_loadu_si512((const void *)(D + 32 * (size_t)b + 16));
    const size_t off = (size_t)(b >> 4) * 512 + 4 * (size_t)(b & 15);
    for (int r = 0; r < R; r++) {
      const uint8_t *wb = w + r * rowBytes + off;
      __m512i a0 = _mm512_dpbusd_epi32(cv, _mm512_set1_epi32(*(const int32_t *)wb), xv[0]);
      __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(*(const int32_t *)(wb + 64)), xv[1]);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(*(const int32_t *)(wb + 128)), xv[2]);
      a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(*(const int32_t *)(wb + 192)), xv[3]);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(*(const int32_t *)(wb + 256)), xv[4]);
      a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(*(const int32_t *)(wb + 320)), xv[5]);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(*(const int32_t *)(wb + 384)), xv[6]);
      a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(*(const int32_t *)(wb + 448)), xv[7]);
      const __m512i p = _mm512_add_epi32(a0, a1);
      const float sr = _cvtsh_ss(s[(size_t)r * srow + b]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_set1_ps(sr)), acc[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float o[16];
    _mm512_storeu_ps(o, acc[r]);
    for (int t = 0; t < tokens; t++) y[(size_t)t * ystride + r] = o[t];
  }
}

// The GEMM of n tokens (xt, dxt from tk_q8lt_prep) over R = 8 or 4 rows in the lanes
// layout: w their first row (rows ng * 512 bytes apart), s its scales (rows ng * 16 apart);
// y: their first output (tokens ystride apart). The first token group's pass fetches `next`
// (the next tile's bytes); prefetches never fault, so it may run past the weight's end.
static inline void lanes_gemm_rows(const uint8_t *w, const uint16_t *s, int nb, int R, const uint8_t *xt, const float *dxt, int n, float *y, int ystride,
                                   struct tile_prefetch next) {
  const int ng = (nb + 15) / 16;
  const size_t rowBytes = (size_t)ng * 512;
  const int cols = nb * 32;
  const struct tile_prefetch none = {0, 0, 0, 0};
  for (int g = 0; g < (n + 15) / 16; g++) {
    const int tokens = n - 16 * g < 16 ? n - 16 * g : 16;
    const uint8_t *X = xt + (size_t)g * cols * 16;
    const float *D = dxt + (size_t)g * nb * 32;
    float *yt = y + (size_t)g * 16 * ystride;
    if (R == 8) gemm_q8t(w, rowBytes, s, (size_t)ng * 16, nb, X, D, yt, ystride, tokens, 8, g == 0 ? next : none);
    else gemm_q8t(w, rowBytes, s, (size_t)ng * 16, nb, X, D, yt, ystride, tokens, 4, g == 0 ? next : none);
  }
}

// Thread shares in pairs of tiles (8 rows); the odd last tile goes to the last thread: the rows
// of pair pr (8, 4 or none) for thread tid, whose pairs end at p1.
static inline int pair_rows(int pr, int p1, int tiles, int tid, int nt) { return pr < p1 ? 8 : (tid == nt - 1 && (tiles & 1) ? 4 : 0); }

#endif
#endif
