// Q4_0 on AVX-512 VNNI in a lanes layout, the 4-bit twin of Q8_0's (gemm-vnni.c): the
// weights are re-laid once at upload (tk_repack_q4l) so that one 64-byte load holds 8 weights
// of each of 16 blocks, and the activations are those of Q8_0's preps (tk_q8l_prep,
// tk_q8lt_prep: s8 quants in the same lane order, f32 scales, i32 corrections). Per row, ng =
// ceil(nb / 16) groups of 256 bytes:
//   wq [rowsPad][ng][4 k][16 j][4 i] u8: low nibble w[block 16g + j][8k + i] + 8, high nibble
//      w[16g + j][8k + 4 + i] + 8 (8 | 8 << 4 in padding blocks),
//   ws [rowsPad][ng * 16] f16 bits: the block scales (0 in padding).
// The nibbles are the unsigned u8 operand of vpdpbusd, times the signed activations; the +8
// comes back off as -8 * sum(q) per block and token, the Q8_0 correction -128 * sum(q) shifted
// right by 4 (exact: a multiple of 16). So a row's 16 block sums of a group come out of 8
// vpdpbusd in one vector, exact in i32, and are scaled and added in f32 in Q8_0's fixed order:
// a row-token gets the same bits at n = 1 and in any batch, whatever the thread split.
// Prefill unpacks each 8-row tile once to Q8_0's lanes layout and runs its GEMM (lanes.h).
#include "lanes.h"
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Raw ggml Q4_0 rows at src (18 bytes a block: f16 scale, 16 bytes: element e < 16 the low
// nibble of byte e, e >= 16 the high nibble of byte e - 16) -> rows r0..r0+rows-1 of the layout.
void tk_repack_q4l(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int ng = (nb + 15) / 16;
  for (int i = part(rows, tid, nt); i < part(rows, tid + 1, nt); i++) {
    const uint8_t *s = m + src + (size_t)i * nb * 18;
    uint8_t *q = m + wq + (size_t)(r0 + i) * ng * 256;
    uint16_t *sc = (uint16_t *)(m + ws) + (size_t)(r0 + i) * ng * 16;
    for (int b = 0; b < ng * 16; b++) {
      uint8_t e[32];
      for (int k = 0; k < 16; k++) {
        e[k] = b < nb ? s[18 * b + 2 + k] & 15 : 8;
        e[k + 16] = b < nb ? s[18 * b + 2 + k] >> 4 : 8;
      }
      sc[b] = b < nb ? rd16(s + 18 * (size_t)b) : 0;
      uint8_t *qb = q + (size_t)(b >> 4) * 256 + 4 * (b & 15);
      for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) qb[64 * k + j] = (uint8_t)(e[8 * k + j] | (e[8 * k + 4 + j] << 4));
    }
  }
}

// One row (wr: its ng groups, sr: its scales) times T (1..8) tokens: token t's quants at
// xq + t * xstride, its scales and corrections at dxc + t * dstride (floats), as row_q8l.
static inline __attribute__((always_inline)) void row_q4l(const uint8_t *wr, const uint16_t *sr, int ng, const uint8_t *xq, size_t xstride, const float *dxc,
                                                          size_t dstride, float *y, int ystride, const int T) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 acc[8];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
  for (int g = 0; g < ng; g++) {
    const uint8_t *wg = wr + 256 * (size_t)g;
    __m512i s[8];
    for (int t = 0; t < T; t++) s[t] = _mm512_srai_epi32(_mm512_loadu_si512((const void *)(dxc + t * dstride + 16 * (size_t)(ng + g))), 4);
    for (int k = 0; k < 4; k++) {
      _mm_prefetch((const char *)wg + PREFETCH + 64 * k, _MM_HINT_T1);
      const __m512i wv = _mm512_loadu_si512((const void *)(wg + 64 * k));
      const __m512i lo = _mm512_and_si512(wv, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low);
      for (int t = 0; t < T; t++) {
        const uint8_t *x = xq + t * xstride + 512 * (size_t)g + 128 * k;
        s[t] = _mm512_dpbusd_epi32(s[t], lo, _mm512_loadu_si512((const void *)x));
        s[t] = _mm512_dpbusd_epi32(s[t], hi, _mm512_loadu_si512((const void *)(x + 64)));
      }
    }
    const __m512 sw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sr + 16 * (size_t)g)));
    for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(sw, _mm512_loadu_ps(dxc + t * dstride + 16 * (size_t)g)), acc[t]);
  }
  for (int t = 0; t < T; t++) y[t * ystride] = _mm512_reduce_add_ps(acc[t]);
}

// n tokens (any n; xq, dxc from tk_q8l_prep): token t's outputs are bit for bit those of n = 1
// on x_t alone; each weight row is read once per run of up to 8 tokens. Threads split the
// 4-row tiles.
void tk_mm_q4l(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dxc, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int ng = (cols / 32 + 15) / 16;
  const size_t xstride = (size_t)ng * 512;
  const size_t dstride = (size_t)ng * 32;
  for (int r = 4 * part(tiles, tid, nt); r < 4 * part(tiles, tid + 1, nt); r++) {
    const uint8_t *wr = m + wq + (size_t)r * ng * 256;
    const uint16_t *sr = (const uint16_t *)(m + ws) + (size_t)r * ng * 16;
    for (int t = 0; t < n; t += 8) {
      const uint8_t *xt = m + xq + (size_t)t * xstride;
      const float *dt = (const float *)(m + dxc) + (size_t)t * dstride;
      float *yt = (float *)(m + y) + (size_t)t * ystride + r;
      switch (n - t < 8 ? n - t : 8) {
        case 1: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 1); break;
        case 2: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 2); break;
        case 3: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 3); break;
        case 4: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 4); break;
        case 5: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 5); break;
        case 6: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 6); break;
        case 7: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 7); break;
        default: row_q4l(wr, sr, ng, xt, xstride, dt, dstride, yt, ystride, 8); break;
      }
    }
  }
}

// R rows of the Q4_0 layout -> R rows of Q8_0's lanes layout (weight + 128 = nibble + 120):
// load k's low nibbles are Q8_0's word 2k, its high nibbles word 2k + 1.
static void unpack_rows(const uint8_t *w, int ng, int R, uint8_t *out) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i k120 = _mm512_set1_epi8(120);
  for (size_t v = 0; v < (size_t)R * ng * 4; v++) {
    const __m512i wv = _mm512_loadu_si512((const void *)(w + 64 * v));
    _mm512_storeu_si512((void *)(out + 128 * v), _mm512_add_epi8(_mm512_and_si512(wv, low), k120));
    _mm512_storeu_si512((void *)(out + 128 * v + 64), _mm512_add_epi8(_mm512_and_si512(_mm512_srli_epi16(wv, 4), low), k120));
  }
}

// Each thread's unpacked tile, grown to the widest weight it has met and kept.
static uint8_t *tile_buffer(size_t bytes) {
  static __thread void *buf;
  static __thread size_t cap;
  uint8_t *tile = (uint8_t *)thread_buf(&buf, &cap, bytes);
  if (!tile) {
    fprintf(stderr, "tandem: out of memory for a %zu-byte Q4_0 tile\n", bytes);
    abort();
  }
  return tile;
}

// Prefill GEMM (xt, dxt from tk_q8lt_prep), tiles shared in pairs (8 rows) as tk_mm_q8lt: each
// pair unpacked once to Q8_0's layout, then Q8_0's GEMM for all tokens.
void tk_mm_q4lt(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int ng = (nb + 15) / 16;
  uint8_t *buf = tile_buffer((size_t)8 * ng * 512);
  const int p1 = part(tiles / 2, tid + 1, nt);
  for (int pr = part(tiles / 2, tid, nt); pr <= p1; pr++) {
    const int R = pair_rows(pr, p1, tiles, tid, nt);
    if (R == 0) break;
    unpack_rows(m + wq + (size_t)pr * 8 * ng * 256, ng, R, buf);
    // the next pair's 8 packed rows and their scales, each contiguous
    const struct tile_prefetch next = {m + wq + (size_t)(pr + 1) * 8 * ng * 256, (size_t)ng * 32, (const uint8_t *)((const uint16_t *)(m + ws) + (size_t)(pr + 1) * 8 * ng * 16),
                                       (size_t)ng * 4};
    lanes_gemm_rows(buf, (const uint16_t *)(m + ws) + (size_t)pr * 8 * ng * 16, nb, R, m + xt, (const float *)(m + dxt), n, (float *)(m + y) + 8 * (size_t)pr, ystride, next);
  }
}
#endif
