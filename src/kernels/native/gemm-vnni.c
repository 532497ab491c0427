// Native-only GEMM kernels for AVX-512 VNNI (Q8_0 decode and prefill; the K-quant prefill GEMM
// is kquant-gemm.c); see docs/kernels.md.
#include "lanes.h"

// ---- AVX-512 VNNI Q8_0 in the lanes layout ------------------------------------------------
// Q8_0 weights are re-laid once at upload (tk_repack_q8l) so that one 64-byte load holds 4
// weights of each of 16 blocks: per row, ng = ceil(nb / 16) groups of 512 bytes,
//   wq [rowsPad][ng][8 k][16 j][4 i] u8 = w[block 16g + j][4k + i] + 128 (128 in padding),
//   ws [rowsPad][ng * 16] f16 bits: the block scales (0 in padding).
// The weights are unsigned so that vpdpbusd (u8 x s8) multiplies them by the signed
// activations; the correction 128 * sum(x) of each block depends on the token only and is
// taken once per token in the preps, never per row. A row's 16 block sums of a group then
// come out of 8 vpdpbusd in one vector, exact in i32 (|sum| < 2^21), and are scaled and added
// in f32 in one fixed order: acc = fma(f32(sum_g), s_w * d_x, acc) over g, then one
// horizontal sum. That order depends on the column position only, so a row-token gets the
// same bits at n = 1 and in any batch, whatever the thread split.

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
int tk_vnni512(void) { return 1; }

// One block b of 32 floats: scale, 32 quants (as 8 little-endian u32 of 4), sum of quants.
static inline float quant_block(const float *xb, uint32_t q[8], int32_t *sum) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 a = _mm512_loadu_ps(xb);
  const __m512 c = _mm512_loadu_ps(xb + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, absmask), _mm512_and_ps(c, absmask)));
  const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
  const __m512i qa = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i qc = _mm512_cvt_roundps_epi32(_mm512_mul_ps(c, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128((__m128i *)(q + 4), _mm512_cvtsepi32_epi8(qc));
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
  return round_f16(amax / 127.0f);
}

// x [n, cols] f32 -> per token xq [ng * 512] s8 in the weights' lane order, then dxc
// [2][ng * 16]: the block scales d (f32) and the corrections -128 * sum(q) (i32), padding 0.
// Quantised as quant_q8_0 (wasm) and llama.cpp: d = f16(amax / 127), q = round-even(x / d').
void tk_q8l_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xq, uint32_t dxc, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int ng = (nb + 15) / 16;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *xt = (const float *)(m + x) + (size_t)t * cols;
    uint32_t *q = (uint32_t *)(m + xq + (size_t)t * ng * 512);
    float *d = (float *)(m + dxc) + (size_t)t * ng * 32;
    int32_t *c = (int32_t *)(d + ng * 16);
    for (int b = 0; b < ng * 16; b++) {
      uint32_t qb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int32_t sum = 0;
      d[b] = b < nb ? quant_block(xt + 32 * (size_t)b, qb, &sum) : 0.0f;
      c[b] = -128 * sum;
      for (int k = 0; k < 8; k++) q[(size_t)(b >> 4) * 128 + 16 * k + (b & 15)] = qb[k];
    }
  }
}

// Raw ggml Q8_0 rows at src (34 bytes a block: f16 scale, 32 quants) -> rows r0..r0+rows-1 of
// the lanes layout.
void tk_repack_q8l(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int ng = (nb + 15) / 16;
  for (int i = part(rows, tid, nt); i < part(rows, tid + 1, nt); i++) {
    const uint8_t *s = m + src + (size_t)i * nb * 34;
    uint32_t *q = (uint32_t *)(m + wq + (size_t)(r0 + i) * ng * 512);
    uint16_t *sc = (uint16_t *)(m + ws) + (size_t)(r0 + i) * ng * 16;
    for (int b = 0; b < ng * 16; b++) {
      uint32_t w[8];
      if (b < nb) {
        for (int k = 0; k < 8; k++) w[k] = ((uint32_t)s[34 * b + 2 + 4 * k] | ((uint32_t)s[34 * b + 3 + 4 * k] << 8) | ((uint32_t)s[34 * b + 4 + 4 * k] << 16) | ((uint32_t)s[34 * b + 5 + 4 * k] << 24)) ^ 0x80808080u;
        sc[b] = rd16(s + 34 * (size_t)b);
      } else {
        for (int k = 0; k < 8; k++) w[k] = 0x80808080u;
        sc[b] = 0;
      }
      for (int k = 0; k < 8; k++) q[(size_t)(b >> 4) * 128 + 16 * k + (b & 15)] = w[k];
    }
  }
}

// One row (wr: its ng groups, sr: its scales) times T (1..8) tokens: token t's quants at
// xq + t * xstride, its scales and corrections at dxc + t * dstride (floats). Each token's
// arithmetic is the same whatever T is (see the layout above); the row is streamed once.
static inline __attribute__((always_inline)) void row_q8l(const uint8_t *wr, const uint16_t *sr, int ng, const uint8_t *xq, size_t xstride, const float *dxc,
                                                          size_t dstride, float *y, int ystride, const int T) {
  __m512 acc[8];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
  for (int g = 0; g < ng; g++) {
    const uint8_t *wg = wr + 512 * (size_t)g;
    __m512i s[8];
    for (int t = 0; t < T; t++) s[t] = _mm512_loadu_si512((const void *)(dxc + t * dstride + 16 * (size_t)(ng + g)));
    for (int k = 0; k < 8; k++) {
      // Far software prefetch into L2 (into L1 it measured slower than none at one token);
      // twice as far with several tokens, whose longer work per row hid less of the stream
      // at the lone token's distance (docs/benchmarks.md, "A faster prefill").
      _mm_prefetch((const char *)wg + (T == 1 ? PREFETCH : 2 * PREFETCH) + 64 * k, _MM_HINT_T1);
      const __m512i wv = _mm512_loadu_si512((const void *)(wg + 64 * k));
      for (int t = 0; t < T; t++) s[t] = _mm512_dpbusd_epi32(s[t], wv, _mm512_loadu_si512((const void *)(xq + t * xstride + 512 * (size_t)g + 64 * k)));
    }
    const __m512 sw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sr + 16 * (size_t)g)));
    for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(sw, _mm512_loadu_ps(dxc + t * dstride + 16 * (size_t)g)), acc[t]);
  }
  for (int t = 0; t < T; t++) y[t * ystride] = _mm512_reduce_add_ps(acc[t]);
}

// Rows [r0, r1) times n tokens (xq, dxc from tk_q8l_prep), runs of up to 8 tokens per pass.
static void rows_q8l(uint8_t *m, uint32_t wq, uint32_t ws, int ng, int r0, int r1, uint32_t xq, uint32_t dxc, int n, float *y, int ystride) {
  const size_t xstride = (size_t)ng * 512;
  const size_t dstride = (size_t)ng * 32;
  for (int r = r0; r < r1; r++) {
    const uint8_t *wr = m + wq + (size_t)r * ng * 512;
    const uint16_t *sr = (const uint16_t *)(m + ws) + (size_t)r * ng * 16;
    for (int t = 0; t < n; t += 8) {
      const uint8_t *xt = m + xq + (size_t)t * xstride;
      const float *dt = (const float *)(m + dxc) + (size_t)t * dstride;
      float *yt = y + (size_t)t * ystride + r;
      switch (n - t < 8 ? n - t : 8) {
        case 1: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 1); break;
        case 2: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 2); break;
        case 3: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 3); break;
        case 4: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 4); break;
        case 5: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 5); break;
        case 6: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 6); break;
        case 7: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 7); break;
        default: row_q8l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 8); break;
      }
    }
  }
}

// n tokens (any n; the matmul takes it below GEMM_TOKENS, matvecRows at any n): token t's
// outputs are bit for bit those of n = 1 on x_t alone; each weight row is read once per run
// of up to 8 tokens. Threads split the 4-row tiles.
void tk_mm_q8l(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dxc, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int ng = (cols / 32 + 15) / 16;
  rows_q8l(m, wq, ws, ng, 4 * part(tiles, tid, nt), 4 * part(tiles, tid + 1, nt), xq, dxc, n, (float *)(m + y), ystride);
}

// Prefill GEMM with tokens across the lanes: xt [G][nb * 8][16] u32 holds, per group of 16
// tokens, 4 consecutive s8 quants of each token in its lane (tokens past n are zero tokens);
// dxt [G][nb][2][16]: per block the 16 tokens' scales (f32, 0 for zero tokens), then their
// corrections -128 * sum(q) (i32). One vpdpbusd with 4 weight bytes broadcast then advances
// 16 tokens at once.
void tk_q8lt_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xt, uint32_t dxt, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int groups = (n + 15) / 16;
  for (int g = part(groups, tid, nt); g < part(groups, tid + 1, nt); g++) {
    uint32_t *X = (uint32_t *)(m + xt + (size_t)g * cols * 16);
    float *D = (float *)(m + dxt) + (size_t)g * nb * 32;
    for (int lane = 0; lane < 16; lane++) {
      const int t = g * 16 + lane;
      const float *xr = (const float *)(m + x) + (size_t)t * cols;
      for (int b = 0; b < nb; b++) {
        uint32_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int32_t sum = 0;
        D[32 * b + lane] = t < n ? quant_block(xr + 32 * (size_t)b, q, &sum) : 0.0f;
        ((int32_t *)D)[32 * b + 16 + lane] = -128 * sum;
        for (int j = 0; j < 8; j++) X[16 * (size_t)(8 * b + j) + lane] = q[j];
      }
    }
  }
}

// The lanes GEMM over rows 8 * pr .. 8 * pr + R - 1 of a Q8_0 weight.
static void gemm_q8_rows(uint8_t *m, uint32_t wq, uint32_t ws, int nb, int pr, int R, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride) {
  const int ng = (nb + 15) / 16;
  // the next pair's 8 rows of quants and scales, each contiguous
  const struct tile_prefetch next = {m + wq + (size_t)(pr + 1) * 8 * ng * 512, (size_t)ng * 64, (const uint8_t *)((const uint16_t *)(m + ws) + (size_t)(pr + 1) * 8 * ng * 16),
                                     (size_t)ng * 4};
  lanes_gemm_rows(m + wq + (size_t)pr * 8 * ng * 512, (const uint16_t *)(m + ws) + (size_t)pr * 8 * ng * 16, nb, R, m + xt, (const float *)(m + dxt), n,
                  (float *)(m + y) + 8 * (size_t)pr, ystride, next);
}

void tk_mm_q8lt(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int p1 = part(tiles / 2, tid + 1, nt);
  for (int pr = part(tiles / 2, tid, nt); pr <= p1; pr++) {
    const int R = pair_rows(pr, p1, tiles, tid, nt);
    if (R == 0) break;
    gemm_q8_rows(m, wq, ws, cols / 32, pr, R, xt, dxt, n, y, ystride);
  }
}

// A prefill GEMM and one-token rows in one pass over the weights: tokens 0..n-1 as tk_mm_q8lt
// (xt, dxt from tk_q8lt_prep; n >= GEMM_TOKENS), then d more tokens (xq, dxc from tk_q8l_prep)
// each as tk_mm_q8l, over each 8-row tile while it is still in cache. Token n + t's outputs go
// to row n + t of y and are bit for bit those of tk_mm_q8l on it alone; rows 0..n-1 those of
// tk_mm_q8lt. So decode steps of other sequences ride along a prefill without streaming the
// weights a second time.
void tk_mm_q8ltv(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t xq, uint32_t dxc, int d, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int ng = (cols / 32 + 15) / 16;
  float *yv = (float *)(m + y) + (size_t)n * ystride;
  const int p1 = part(tiles / 2, tid + 1, nt);
  for (int pr = part(tiles / 2, tid, nt); pr <= p1; pr++) {
    const int R = pair_rows(pr, p1, tiles, tid, nt);
    if (R == 0) break;
    gemm_q8_rows(m, wq, ws, cols / 32, pr, R, xt, dxt, n, y, ystride);
    rows_q8l(m, wq, ws, ng, 8 * pr, 8 * pr + R, xq, dxc, d, yv, ystride);
  }
}
#else
int tk_vnni512(void) { return 0; }
#endif
