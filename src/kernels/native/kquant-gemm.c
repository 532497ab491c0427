// K-quant (Q4_K, Q5_K, Q6_K) prefill GEMM on AVX-512 VNNI, from GEMM_TOKENS tokens on: the
// activations quantised once per matmul to q8_K (quant_q8_k) and transposed by tk_kt_prep into
// groups of 16 tokens, one token per 32-bit lane; each weight row unpacked once per call to i8
// (with its sub-block scales, mins and zero-point correction) and broadcast 4 quants at a time
// against 16 tokens' 4 activations with vpdpbusd.
//
// Register blocking: a pass holds one sub-block's activations of the 16 tokens in registers
// (8 vectors for Q4_K / Q5_K's 32 elements, 4 for Q6_K's 16) and runs them against 8 rows, so
// an activation vector is loaded once per 8 rows and each dpbusd reads one broadcast weight
// word. Per row, token and super-block the sum is exact in i32, as llama.cpp's
// vec_dot_q*_K_q8_K:
//   ai   = sum_s sc_s * sum_k (x_k + 128) * w_k  -  128 * sum_s sc_s * sum_k w_k   (= sum sc * dot)
//   mins = sum_j mn_j * bsum32_j                                          (Q4_K / Q5_K only)
//   acc += dx * (d * f32(ai) - dmin * f32(mins))
// (Q6_K: w = q - 32 signed, 16-element sub-blocks, no mins.) The activations are unsigned
// (q + 128) because vpdpbusd multiplies u8 by s8; the 128 * sum(w) term depends on the row
// only and is taken off once per super-block (corr). mins stays below 2^24 (8 * 4064 * 63), so
// it converts to f32 exactly. A token's lane runs the same arithmetic in every group and at
// every n, so its outputs do not depend on the batch (types.ts, GEMM_TOKENS).
#include "kquant.h"

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Tokens per group: one per 32-bit lane of a vector.
#define KT_GROUP 16
// Rows per pass (the register blocking above).
#define KT_ROWS 8
// The unpacked quants are read 4 at a time as one 32-bit word.
typedef int32_t __attribute__((may_alias)) i32w;

// tk_kt_prep: quant_q8_k's activations (x16 [n, cols] i16 with |q| <= 127, xd [n, nb] f32, xs
// [n, cols/32] i32 sums) into G = ceil(n / 16) groups, token t in group t / 16, lane t % 16:
//   xt  [G][cols/4][16] u32: elements 4k..4k+3 of the token as u8 (q + 128);
//   dxt [G][nb][16] f32: the super-block scales;
//   bst [G][cols/64][16] u32: the sums of 32-element sub-blocks 2j (low i16) and 2j + 1 (high
//   i16), |sum| <= 32 * 127.
// Lanes past n hold q = 0, scale 0 and sums 0. Thread tid takes its share of the groups.
void tk_kt_prep(uintptr_t base, uint32_t x16, uint32_t xd, uint32_t xs, int n, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const int groups = (n + KT_GROUP - 1) / KT_GROUP;
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  for (int g = part(groups, tid, nt); g < part(groups, tid + 1, nt); g++) {
    uint32_t *X = (uint32_t *)(m + xt + (size_t)g * cols * 16);
    float *D = (float *)(m + dxt) + (size_t)g * nb * 16;
    uint32_t *B = (uint32_t *)(m + bst) + (size_t)g * (cols / 64) * 16;
    for (int lane = 0; lane < KT_GROUP; lane++) {
      const int t = g * KT_GROUP + lane;
      if (t >= n) {
        for (int k = 0; k < cols / 4; k++) X[16 * (size_t)k + lane] = 0x80808080u;
        for (int b = 0; b < nb; b++) D[16 * b + lane] = 0;
        for (int j = 0; j < cols / 64; j++) B[16 * j + lane] = 0;
        continue;
      }
      const int16_t *q = (const int16_t *)(m + x16) + (size_t)t * cols;
      for (int k = 0; k < cols / 4; k += 16) {
        // 64 values narrowed to bytes (|q| <= 127: no saturation), biased to u8, then one u32 of
        // 4 per row of xt
        const __m256i lo = _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)(q + 4 * k)));
        const __m256i hi = _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)(q + 4 * k + 32)));
        uint32_t v[16];
        _mm512_storeu_si512((void *)v, _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), bias));
        for (int i = 0; i < 16; i++) X[16 * (size_t)(k + i) + lane] = v[i];
      }
      const float *dx = (const float *)(m + xd) + (size_t)t * nb;
      for (int b = 0; b < nb; b++) D[16 * b + lane] = dx[b];
      const int32_t *s = (const int32_t *)(m + xs) + (size_t)t * (cols / 32);
      for (int j = 0; j < cols / 64; j++) B[16 * j + lane] = (uint32_t)(uint16_t)s[2 * j] | ((uint32_t)(uint16_t)s[2 * j + 1] << 16);
    }
  }
}

// One row unpacked for the GEMM: q [cols] i8 (Q4_K / Q5_K: 0..31; Q6_K: q - 32), sc [cols /
// span] i32 (the scale of each sub-block of span = 32 or 16 elements), mn [cols/64] u32 (Q4_K /
// Q5_K: the mins of sub-blocks 2j and 2j + 1 as two i16), corr [nb] i32 (128 * sum_s sc_s *
// sum(w of s)), d / dmin [nb] f32.
typedef struct {
  int8_t *q;
  int32_t *sc;
  uint32_t *mn;
  int32_t *corr;
  float *d;
  float *dmin;
} krow;

// Q4_K / Q5_K super-block p into the row's block b: scales and mins as ggml's get_scale_min_k4
// (q45_scales), quants as dequantize_row_q4_K / q5_K (bytes 32j..32j+31 of the quants: low
// nibbles elements 64j.., high nibbles 64j + 32..; Q5_K's fifth bits from qh, bits 2j and
// 2j + 1). corr: vpmaddubsw of the quants (u8, <= 31) by their sub-block's scale (as i8, <= 63)
// gives i16 pair sums <= 3906, eight of them per lane <= 31248, then one vpmaddwd by 1 and a
// horizontal sum.
static void unpack_q45(const uint8_t *p, int five, int b, krow r) {
  const __m128i sm = q45_scales(p);
  _mm256_storeu_si256((__m256i *)(r.sc + 8 * (size_t)b), _mm256_cvtepu8_epi32(sm));
  // mins 2j, 2j + 1 as the low and high i16 of u32 j
  _mm_storeu_si128((__m128i *)(r.mn + 4 * (size_t)b), _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
  const __m256i all = _mm256_broadcastsi128_si256(sm);
  const uint8_t *qs = p + (five ? 48 : 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
  int8_t *q = r.q + 256 * (size_t)b;
  __m256i c16 = _mm256_setzero_si256();
  for (int j = 0; j < 4; j++) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
    }
    _mm256_storeu_si256((__m256i *)(q + 64 * j), lo);
    _mm256_storeu_si256((__m256i *)(q + 64 * j + 32), hi);
    c16 = _mm256_add_epi16(c16, _mm256_maddubs_epi16(lo, _mm256_shuffle_epi8(all, _mm256_set1_epi8((char)(2 * j)))));
    c16 = _mm256_add_epi16(c16, _mm256_maddubs_epi16(hi, _mm256_shuffle_epi8(all, _mm256_set1_epi8((char)(2 * j + 1)))));
  }
  r.corr[b] = 128 * _mm512_reduce_add_epi32(_mm512_castsi256_si512(_mm256_madd_epi16(c16, _mm256_set1_epi16(1))));
  r.d[b] = _cvtsh_ss(rd16(p));
  r.dmin[b] = _cvtsh_ss(rd16(p + 2));
}

// Q6_K super-block p into the row's block b (dequantize_row_q6_K's order: per half h, ql bytes
// 64h.. low / high nibbles and qh's bit pairs 0-1, 2-3, 4-5, 6-7 give elements 128h + l, +32,
// +64, +96). corr from the unsigned quants u = q + 32 (<= 63) times their i8 scales
// (vpmaddubsw pairs <= 2 * 63 * 128, summed in i32 per vector), less 32 * 16 * sum(sc).
static void unpack_q6(const uint8_t *p, int b, krow r) {
  const int8_t *sc = (const int8_t *)(p + 192);
  const __m128i sc8 = _mm_loadu_si128((const __m128i *)sc);
  _mm512_storeu_si512((void *)(r.sc + 16 * (size_t)b), _mm512_cvtepi8_epi32(sc8));
  const __m256i all = _mm256_broadcastsi128_si256(sc8);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m32 = _mm256_set1_epi8(32);
  const __m256i ones = _mm256_set1_epi16(1);
  int8_t *q = r.q + 256 * (size_t)b;
  __m256i c32 = _mm256_setzero_si256();
  for (int h = 0; h < 2; h++) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
    const __m256i c = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
    __m256i u[4];
    u[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
    u[1] = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
    for (int k = 0; k < 4; k++) {
      // elements 128h + 32k.. : sub-blocks 8h + 2k (bytes 0-15) and 8h + 2k + 1 (bytes 16-31)
      _mm256_storeu_si256((__m256i *)(q + 128 * h + 32 * k), _mm256_sub_epi8(u[k], m32));
      const __m256i s = _mm256_shuffle_epi8(
          all, _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi8((char)(8 * h + 2 * k))), _mm_set1_epi8((char)(8 * h + 2 * k + 1)), 1));
      c32 = _mm256_add_epi32(c32, _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], s), ones));
    }
  }
  int ssum = 0;
  for (int i = 0; i < 16; i++) ssum += sc[i];
  r.corr[b] = 128 * (_mm512_reduce_add_epi32(_mm512_castsi256_si512(c32)) - 32 * 16 * ssum);
  r.d[b] = _cvtsh_ss(rd16(p + 208));
  r.dmin[b] = 0;
}

// R unpacked rows times one group of 16 tokens into y[t * ystride + r] (t < tokens). SPAN: 32
// (Q4_K / Q5_K) or 16 (Q6_K) elements per sub-block scale; MINS: Q4_K / Q5_K.
static inline __attribute__((always_inline)) void gemm_kt(const krow *rows, int nb, const uint8_t *X, const float *D, const uint32_t *B, float *y,
                                                          int ystride, int tokens, const int R, const int SPAN, const int MINS) {
  const int V = SPAN / 4; // activation vectors (and broadcast weight words) per sub-block
  const int NS = 256 / SPAN;
  __m512 acc[KT_ROWS];
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    __m512i ai[KT_ROWS];
    for (int r = 0; r < R; r++) ai[r] = _mm512_setzero_si512();
    for (int s = 0; s < NS; s++) {
      // each activation vector loaded once and run against the R rows (R independent chains)
      const uint8_t *xs = X + 64 * (size_t)(64 * b + V * s);
      __m512i p[KT_ROWS];
      for (int r = 0; r < R; r++) p[r] = _mm512_setzero_si512();
      for (int v = 0; v < V; v++) {
        const __m512i x = _mm512_loadu_si512((const void *)(xs + 64 * v));
        for (int r = 0; r < R; r++) {
          const i32w *wq = (const i32w *)(rows[r].q + 256 * (size_t)b + SPAN * s);
          p[r] = _mm512_dpbusd_epi32(p[r], x, _mm512_set1_epi32(wq[v]));
        }
      }
      for (int r = 0; r < R; r++) ai[r] = _mm512_add_epi32(ai[r], _mm512_mullo_epi32(p[r], _mm512_set1_epi32(rows[r].sc[NS * b + s])));
    }
    const __m512 dv = _mm512_loadu_ps(D + 16 * (size_t)b);
    __m512i bs[4];
    if (MINS)
      for (int j = 0; j < 4; j++) bs[j] = _mm512_loadu_si512((const void *)(B + 16 * (size_t)(4 * b + j)));
    for (int r = 0; r < R; r++) {
      const __m512i a = _mm512_sub_epi32(ai[r], _mm512_set1_epi32(rows[r].corr[b]));
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_set1_ps(rows[r].d[b]));
      if (MINS) {
        const uint32_t *mn = rows[r].mn + 4 * b;
        __m512i mi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs[0], _mm512_set1_epi32((int)mn[0]));
        for (int j = 1; j < 4; j++) mi = _mm512_dpwssd_epi32(mi, bs[j], _mm512_set1_epi32((int)mn[j]));
        v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_set1_ps(rows[r].dmin[b]), v);
      }
      acc[r] = _mm512_fmadd_ps(v, dv, acc[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float o[16];
    _mm512_storeu_ps(o, acc[r]);
    for (int t = 0; t < tokens; t++) y[(size_t)t * ystride + r] = o[t];
  }
}

// One instance per (rows, type class), so the loops above unroll and the accumulators stay in
// registers.
static void gemm_kt_any(int type, int R, const krow *rows, int nb, const uint8_t *X, const float *D, const uint32_t *B, float *y, int ystride, int tokens) {
  if (type == 14) {
    if (R == 8) gemm_kt(rows, nb, X, D, B, y, ystride, tokens, 8, 16, 0);
    else gemm_kt(rows, nb, X, D, B, y, ystride, tokens, 4, 16, 0);
  } else {
    if (R == 8) gemm_kt(rows, nb, X, D, B, y, ystride, tokens, 8, 32, 1);
    else gemm_kt(rows, nb, X, D, B, y, ystride, tokens, 4, 32, 1);
  }
}

// y [n, ystride] = x W^T for this thread's rows: tiles of 4 rows, taken in pairs (8 rows a pass;
// the last thread takes an odd last tile alone). type 12 Q4_K, 13 Q5_K, 14 Q6_K; xt, dxt, bst
// from tk_kt_prep.
void tk_mm_kt(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int n, uint32_t y, int ystride, int tiles,
              int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const int groups = (n + KT_GROUP - 1) / KT_GROUP;
  const int pairs = tiles / 2;
  const int p0 = part(pairs, tid, nt);
  const int p1 = part(pairs, tid + 1, nt);
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  // per row: q [cols] i8, sc [cols/16] i32, mn [cols/64] u32, corr, d, dmin [nb]
  const size_t per = (size_t)cols + (size_t)cols / 16 * 4 + (size_t)cols / 64 * 4 + (size_t)nb * 12;
  uint8_t *buf = (uint8_t *)aligned_alloc(64, (KT_ROWS * per + 63) / 64 * 64);
  if (!buf) return;
  krow rows[KT_ROWS];
  for (int r = 0; r < KT_ROWS; r++) {
    uint8_t *b0 = buf + r * per;
    rows[r].q = (int8_t *)b0;
    rows[r].sc = (int32_t *)(b0 + cols);
    rows[r].mn = (uint32_t *)(b0 + cols + cols / 16 * 4);
    rows[r].corr = (int32_t *)(rows[r].mn + cols / 64);
    rows[r].d = (float *)(rows[r].corr + nb);
    rows[r].dmin = rows[r].d + nb;
  }
  for (int pr = p0; pr <= p1; pr++) {
    const int R = pr < p1 ? 8 : (tid == nt - 1 && (tiles & 1) ? 4 : 0);
    if (R == 0) break;
    for (int r = 0; r < R; r++) {
      const uint8_t *row = m + w + (size_t)(8 * pr + r) * rowBytes;
      for (int b = 0; b < nb; b++) {
        if (type == 14) unpack_q6(row + (size_t)b * bytes, b, rows[r]);
        else unpack_q45(row + (size_t)b * bytes, type == 13, b, rows[r]);
      }
    }
    for (int g = 0; g < groups; g++) {
      const int tokens = n - KT_GROUP * g < KT_GROUP ? n - KT_GROUP * g : KT_GROUP;
      gemm_kt_any(type, R, rows, nb, m + xt + (size_t)g * cols * 16, (const float *)(m + dxt) + (size_t)g * nb * 16,
                  (const uint32_t *)(m + bst) + (size_t)g * (cols / 64) * 16, (float *)(m + y) + (size_t)g * KT_GROUP * ystride + 8 * (size_t)pr,
                  ystride, tokens);
    }
  }
  free(buf);
}
#endif
