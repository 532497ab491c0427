// Q4_0 on AVX-512 VNNI with the activations quantised once per matmul, as llama.cpp does
// (q8_0 blocks of the activations: tk_q8_prep / tk_q8t_prep below, the "blocked" activation
// layouts, which the NEON build shares for Q8_0 and Q4_0), on the repacked Q4_0 weights of
// kernels.c (quants [rowsPad, cols / 2]: per block of 32, 16 bytes, low nibbles elements 0-15,
// high nibbles 16-31; scales [rowsPad/4, nb, 4] f32). Q8_0 on VNNI has its own layouts
// (gemm-vnni.c, lanes).
//
// Decode (tk_mm_q4v): per pair of blocks the 32 bytes become 64 i8 weights (nibble - 8) in one
// vector and one vpdpbusd multiplies them by (q + 128) of the activations, 128 * sum(w) taken
// off. Prefill (tk_mm_q4t): each 8-row tile is decoded once to i8 rows, then multiplied by a
// tokens-across-lanes GEMM, so the nibble decoding is paid once per tile for all tokens
// instead of once per group of 15.
#include "common.h"

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// tk_q8_prep quantises x [n, cols] f32 exactly as quant_q8_0 (wasm) and llama.cpp do (d =
// f16(amax / 127), q = nearest-even(x * 127 / amax)) and stores q + 128 as u8: xu [n, cp]
// (cp = cols rounded up to 64 elements, padding q = 0) and d: dx [n, nbp] f32 (nbp = cp / 32,
// padding 0).
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

// Tokens across the lanes: xt [G][cols/4][16][4] u8 holds, per group of 15 tokens, 4
// consecutive (q + 128) quants of each token in lanes 0-14 and of a zero token in lane 15
// (tokens past n are zero tokens too); dxt [G][nb][16] f32 their block scales (0 for zero
// tokens). One vpdpbusd with 4 weight bytes broadcast then advances 15 tokens at once; lane 15
// comes out as 128 * sum(w) of the block, the correction every lane takes off.
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

// Blocks b and b + 1 of a Q4_0 row (32 bytes): lanes 0-7 block b, 8-15 block b + 1.
static inline __m512i q4_pair(const uint8_t *p) {
  const __m256i v = _mm256_loadu_si256((const __m256i *)p);
  const __m256i m = _mm256_set1_epi8(0x0f);
  const __m256i lo = _mm256_and_si256(v, m);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  // block b: lo[0..15] then hi[0..15]; block b + 1: lo[16..31] then hi[16..31]
  const __m256i b0 = _mm256_permute2x128_si256(lo, hi, 0x20);
  const __m256i b1 = _mm256_permute2x128_si256(lo, hi, 0x31);
  return _mm512_sub_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1), _mm512_set1_epi8(8));
}

// One 4-row tile times T (1..8) tokens; each token's arithmetic is the same whatever T is
// (two accumulators alternating over block pairs, the odd tail block in the first).
static inline __attribute__((always_inline)) void tile_q4v(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, size_t xstride,
                                                           const float *dx, int dxstride, float *y, int ystride, const int T) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i k128 = _mm512_set1_epi8((char)0x80);
  const __m512i dsel = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int r = 0; r < 4; r++) {
    const uint8_t *wr = w + r * rowBytes;
    __m512 acc[2][8];
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    int b = 0;
    for (int i = 0; b + 2 <= nb; i++, b += 2) {
      _mm_prefetch((const char *)(wr + 16 * (size_t)b) + PREFETCH, _MM_HINT_T0);
      const __m512i wv = q4_pair(wr + 16 * (size_t)b);
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wv));
      const __m512 sw = _mm512_permutexvar_ps(dsel, _mm512_castps128_ps512(_mm_set_ps(0, 0, s[4 * (b + 1) + r], s[4 * b + r])));
      for (int t = 0; t < T; t++) {
        const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + t * xstride + 32 * (size_t)b)), wv);
        const __m512 dxv = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(dx + (size_t)t * dxstride + b))));
        acc[i & 1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw, _mm512_permutexvar_ps(dsel, dxv)), acc[i & 1][t]);
      }
    }
    if (b < nb) {
      // the last block alone: its 16 bytes as the low half, the high half's products masked off
      const __m256i v = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(wr + 16 * (size_t)b)));
      const __m256i m = _mm256_set1_epi8(0x0f);
      const __m256i b0 = _mm256_permute2x128_si256(_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16(v, 4), m), 0x20);
      const __m512i wv = _mm512_sub_epi8(_mm512_castsi256_si512(b0), _mm512_set1_epi8(8));
      const __m512i wz = _mm512_maskz_mov_epi8(0xffffffffULL, wv);
      const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k128, wz));
      for (int t = 0; t < T; t++) {
        const __m512i p = _mm512_dpbusd_epi32(neg, _mm512_loadu_si512((const void *)(xu + t * xstride + 32 * (size_t)b)), wz);
        acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_maskz_mov_ps(0xff, _mm512_set1_ps(s[4 * b + r] * dx[(size_t)t * dxstride + b])), acc[0][t]);
      }
    }
    for (int t = 0; t < T; t++) y[t * ystride + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
  }
}

// xu, dx from tk_q8_prep (xu [n, cp] u8, dx [n, nbp] f32); any n, each row read once per 8 tokens.
void tk_mm_q4v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  const size_t rowBytes = (size_t)cols / 2;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++) {
    const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
    const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
    for (int t = 0; t < n; t += 8) {
      const uint8_t *xt = m + xu + (size_t)t * cp;
      const float *dt = (const float *)(m + dx) + (size_t)t * nbp;
      float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
      switch (n - t < 8 ? n - t : 8) {
        case 1: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 1); break;
        case 2: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 2); break;
        case 3: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 3); break;
        case 4: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 4); break;
        case 5: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 5); break;
        case 6: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 6); break;
        case 7: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 7); break;
        default: tile_q4v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, 8); break;
      }
    }
  }
}

// R decoded i8 rows (cols bytes apart; scales s of their 4-row tiles) by one group of 15
// tokens (xt, dxt from tk_q8t_prep): one vpdpbusd per 4 weights and
// 15 tokens, lane 15 (the zero token) carrying 128 * sum(w) to take off.
static inline __attribute__((always_inline)) void gemm_q4t(const int8_t *w, int cols, const float *s, int nb, const uint8_t *X, const float *D, float *y,
                                                           int ystride, int tokens, const int R) {
  __m512 acc[8];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  const __m512i last = _mm512_set1_epi32(15);
  for (int b = 0; b < nb; b++) {
    __m512i xv[8];
    for (int j = 0; j < 8; j++) xv[j] = _mm512_loadu_si512((const void *)(X + 64 * (size_t)(8 * b + j)));
    const __m512 dv = _mm512_loadu_ps(D + 16 * (size_t)b);
    for (int r = 0; r < R; r++) {
      const int32_t *wr = (const int32_t *)(w + r * (size_t)cols + 32 * (size_t)b);
      __m512i a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv[0], _mm512_set1_epi32(wr[0]));
      __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xv[1], _mm512_set1_epi32(wr[1]));
      for (int j = 2; j < 8; j += 2) {
        a0 = _mm512_dpbusd_epi32(a0, xv[j], _mm512_set1_epi32(wr[j]));
        a1 = _mm512_dpbusd_epi32(a1, xv[j + 1], _mm512_set1_epi32(wr[j + 1]));
      }
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

// R Q4_0 rows (rowBytes = cols / 2 apart) -> i8 rows (nibble - 8, element order) in buf [R, cols].
static void decode_rows(const uint8_t *w, int cols, int R, int8_t *buf) {
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  for (int r = 0; r < R; r++)
    for (int b = 0; b < cols / 32; b++) {
      const __m128i v = _mm_loadu_si128((const __m128i *)(w + (size_t)r * (cols / 2) + 16 * (size_t)b));
      int8_t *o = buf + (size_t)r * cols + 32 * (size_t)b;
      _mm_storeu_si128((__m128i *)o, _mm_sub_epi8(_mm_and_si128(v, m), eight));
      _mm_storeu_si128((__m128i *)(o + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight));
    }
}

// Prefill GEMM, tiles shared in pairs (8 rows); the odd last tile goes to the last thread.
void tk_mm_q4t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int groups = (n + 14) / 15;
  const int pairs = tiles / 2;
  const int p0 = part(pairs, tid, nt);
  const int p1 = part(pairs, tid + 1, nt);
  int8_t *buf = (int8_t *)malloc((size_t)8 * cols);
  if (!buf) return;
  for (int pr = p0; pr <= p1; pr++) {
    const int R = pr < p1 ? 8 : (tid == nt - 1 && (tiles & 1) ? 4 : 0);
    if (R == 0) break;
    decode_rows(m + wq + (size_t)pr * 8 * (cols / 2), cols, R, buf);
    const float *s = (const float *)(m + ws) + (size_t)pr * 2 * nb * 4;
    for (int g = 0; g < groups; g++) {
      const int tokens = n - 15 * g < 15 ? n - 15 * g : 15;
      const uint8_t *X = m + xt + (size_t)g * cols * 16;
      const float *D = (const float *)(m + dxt) + (size_t)g * nb * 16;
      float *yt = (float *)(m + y) + (size_t)g * 15 * ystride + 8 * (size_t)pr;
      if (R == 8) gemm_q4t(buf, cols, s, nb, X, D, yt, ystride, tokens, 8);
      else gemm_q4t(buf, cols, s, nb, X, D, yt, ystride, tokens, 4);
    }
  }
  free(buf);
}
#endif
