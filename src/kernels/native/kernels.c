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

#if defined(__AVX2__) && !defined(__AVX512BW__)
// The 8 lanes' sum, in a fixed order (halves, then pairs, then the last two).
static inline float sum8(__m256 a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

// One 4-row tile times nt (1 or 2, a constant where it is inlined: 8 accumulators fit the 16
// ymm registers) tokens of int8 activations [nt, xstride]. A block's dot for one row and token: maddubs(|w|, x * sign(w)) gives
// 16 exact i16 sums of two products (|w| <= 128, |x| <= 127 as quant_q8_0 makes them), madd
// with ones 8 i32 sums of four, converted and scaled (weight scale x token scale) into 8 f32
// lanes; the lanes are summed once at the end. A (row, token) result depends on nothing else
// in the call, so a token's bits are the same at any batch size below GEMM_TOKENS, where mm
// runs it (from GEMM_TOKENS on: tile8_avx2).
static inline __attribute__((always_inline)) void tile_avx2(const uint8_t *w, size_t rowBytes, const float *s, int nb,
                                                            const int8_t *x, size_t xstride, const float *xd,
                                                            int xdstride, float *y, int ystride, const int nt, int q4,
                                                            const int pf) {
  __m256 acc[4][2];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_ps();
  const size_t bb = q4 ? 16 : 32;
  const __m256i ones = _mm256_set1_epi16(1);
  // the tile's streams, each advanced by one block a step: the loop keeps no index arithmetic
  // (with the column count unknown to the compiler, the products of b with the strides took
  // general registers that it then spilled)
  const uint8_t *w0 = w, *w1 = w + rowBytes, *w2 = w + 2 * rowBytes, *w3 = w + 3 * rowBytes;
  const int8_t *x0 = x, *x1 = x + (nt > 1 ? xstride : 0);
  const float *d0 = xd, *d1 = xd + (nt > 1 ? xdstride : 0);
  const float *const send = s + 4 * (size_t)nb;
  for (; s < send; s += 4, w0 += bb, w1 += bb, w2 += bb, w3 += bb, x0 += 32, x1 += 32, d0++, d1++) {
    __m256i xq[2];
    // a block's scales, weight x token, for each row and token: one product each, read back
    // as broadcasts
    float sc[2][4];
    const __m128 s4 = _mm_loadu_ps(s);
    xq[0] = _mm256_loadu_si256((const __m256i *)x0);
    _mm_storeu_ps(sc[0], _mm_mul_ps(s4, _mm_set1_ps(*d0)));
    if (nt > 1) {
      xq[1] = _mm256_loadu_si256((const __m256i *)x1);
      _mm_storeu_ps(sc[1], _mm_mul_ps(s4, _mm_set1_ps(*d1)));
    }
    const uint8_t *rows[4] = {w0, w1, w2, w3};
    for (int r = 0; r < 4; r++) {
      const uint8_t *wb = rows[r];
      // pf 1, a tile's first pass: its four rows are four streams from memory, fetched a few
      // KiB ahead; pf 2, its last pass of several (which find it in cache): the next tile's
      // same block, so that memory keeps streaming while the tile computes
      if (pf == 1) _mm_prefetch((const char *)(wb + PREFETCH), _MM_HINT_T0);
      else if (pf == 2) _mm_prefetch((const char *)(wb + 4 * rowBytes), _MM_HINT_T0);
      const __m256i q = q4 ? block_q4(wb) : block_q8(wb);
      const __m256i aw = _mm256_sign_epi8(q, q);
      for (int t = 0; t < nt; t++) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[t], q)), ones);
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[t][r]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < nt; t++)
    for (int r = 0; r < 4; r++) y[t * ystride + r] = sum8(acc[r][t]);
}

// Q8_0 in groups of 8 blocks (256 values): a row's or a token's group is 8 vectors of 32 bytes,
// vector j holding bytes 4j..4j+3 of block i of the group in its dword lane i. maddubs and madd
// of vector j give lane i 4 products of block i, and the 8 vectors' sums, added as i32, give
// lane i its block's exact dot; one cvt and one fma (by the 8 blocks' weight x token scales)
// then take a whole group, where the block layout takes one of each per block and a scale
// broadcast besides. Blocks past nb are zeros with zero scales (an exact +0). A (row, token)
// result depends on nothing else in the call: a token's bits are the same in any batch of
// GEMM_TOKENS or more (they differ from tile_avx2's in the last bits: the sums run in another
// order).
#define GROUP 256
static inline int groups8(int nb) { return (nb + 7) / 8; }

// `blocks` (1..8) blocks of 32 bytes from `src` as one group at `dst` (see above): an 8 x 8
// transpose of dwords.
static inline void group8(const int8_t *src, int blocks, int8_t *dst) {
  __m256i v[8];
  for (int i = 0; i < 8; i++) v[i] = i < blocks ? _mm256_loadu_si256((const __m256i *)(src + 32 * i)) : _mm256_setzero_si256();
  __m256i t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_epi32(v[k], v[k + 1]);
    t[k + 1] = _mm256_unpackhi_epi32(v[k], v[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
    u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
    u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
    u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
  }
  // u[k] (k < 4) holds dwords k and k + 4 of blocks 0-3, u[k + 4] of blocks 4-7
  for (int k = 0; k < 4; k++) {
    _mm256_store_si256((__m256i *)(dst + 32 * k), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
    _mm256_store_si256((__m256i *)(dst + 32 * (k + 4)), _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
  }
}

// One 4-row tile of grouped weights wg [ng][4][256] with scales sg [ng][4][8] times nt (1 or 2)
// tokens of grouped activations xg [nt, xstride] with scales xdg [nt, xdstride] (ng * 8 each).
// With `next`, the next tile's four rows (rowBytes apart) are fetched a group a step.
static inline __attribute__((always_inline)) void tile8_avx2(const int8_t *wg, const float *sg, int ng, const int8_t *xg,
                                                             size_t xstride, const float *xdg, const int32_t *xcg,
                                                             size_t xdstride, float *y, int ystride, const int nt,
                                                             const int q4, const uint8_t *next, size_t rowBytes) {
  __m256 acc[4][2];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t *x0 = xg, *x1 = xg + (nt > 1 ? xstride : 0);
  const float *d0 = xdg, *d1 = xdg + (nt > 1 ? xdstride : 0);
  const int32_t *c0 = xcg, *c1 = xcg + (nt > 1 ? xdstride : 0);
  for (int g = 0; g < ng; g++, wg += 4 * GROUP, sg += 32, x0 += GROUP, x1 += GROUP, d0 += 8, d1 += 8, c0 += 8, c1 += 8) {
    if (next)
      for (int r = 0; r < 4; r++)
        for (int l = 0; l < GROUP; l += 64) _mm_prefetch((const char *)(next + r * rowBytes + (size_t)g * GROUP + l), _MM_HINT_T0);
    __m256i is[4][2];
    for (int r = 0; r < 4; r++)
      for (int t = 0; t < nt; t++) is[r][t] = _mm256_setzero_si256();
    // Q4_0: raw nibbles (0..15) times x, a pair of products at most 2 * 15 * 127 in size, 8 of
    // them 30,480: the group's pairs add up in i16 and widen once, and 8 * (the block's x sum)
    // then takes the nibbles' offset of 8 back off. Q8_0: maddubs(|w|, x * sign(w)) as in
    // tile_avx2, widened every step. (The step loop stays rolled: unrolled, GCC computed all
    // of a group's products ahead of their sums and spilled them.)
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
      __m256i xq[2];
      xq[0] = _mm256_load_si256((const __m256i *)(x0 + 32 * j));
      if (nt > 1) xq[1] = _mm256_load_si256((const __m256i *)(x1 + 32 * j));
      for (int r = 0; r < 4; r++) {
        const __m256i q = _mm256_load_si256((const __m256i *)(wg + r * GROUP + 32 * j));
        if (q4) {
          for (int t = 0; t < nt; t++) is[r][t] = _mm256_add_epi16(is[r][t], _mm256_maddubs_epi16(q, xq[t]));
        } else {
          const __m256i aw = _mm256_sign_epi8(q, q);
          for (int t = 0; t < nt; t++)
            is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[t], q)), ones));
        }
      }
    }
    if (q4) {
      const __m256i off0 = _mm256_loadu_si256((const __m256i *)c0);
      const __m256i off1 = nt > 1 ? _mm256_loadu_si256((const __m256i *)c1) : off0;
      for (int r = 0; r < 4; r++) {
        is[r][0] = _mm256_sub_epi32(_mm256_madd_epi16(is[r][0], ones), off0);
        if (nt > 1) is[r][1] = _mm256_sub_epi32(_mm256_madd_epi16(is[r][1], ones), off1);
      }
    }
    __m256 xs[2];
    xs[0] = _mm256_loadu_ps(d0);
    if (nt > 1) xs[1] = _mm256_loadu_ps(d1);
    for (int r = 0; r < 4; r++) {
      const __m256 sw = _mm256_loadu_ps(sg + 8 * r);
      for (int t = 0; t < nt; t++)
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][t]), _mm256_mul_ps(sw, xs[t]), acc[r][t]);
    }
  }
  for (int t = 0; t < nt; t++)
    for (int r = 0; r < 4; r++) y[t * ystride + r] = sum8(acc[r][t]);
}

// tile8_avx2 for each token count and weight type, each compiled on its own: inlined into mm,
// with mm's own values live around it, its accumulators were spilled inside the group loop.
typedef void (*tile8_fn)(const int8_t *, const float *, int, const int8_t *, size_t, const float *, const int32_t *,
                         size_t, float *, int, const uint8_t *, size_t);
#define TILE8(name, nt, q4)                                                                                          \
  static __attribute__((noinline)) void name(const int8_t *wg, const float *sg, int ng, const int8_t *xg, size_t xs, \
                                             const float *xdg, const int32_t *xcg, size_t ds, float *y, int ystride,  \
                                             const uint8_t *next, size_t rowBytes) {                                  \
    tile8_avx2(wg, sg, ng, xg, xs, xdg, xcg, ds, y, ystride, nt, q4, next, rowBytes);                                 \
  }
TILE8(tile8_q8_1, 1, 0)
TILE8(tile8_q8_2, 2, 0)
TILE8(tile8_q4_1, 1, 1)
TILE8(tile8_q4_2, 2, 1)
#undef TILE8

// The activations' int8 quants x8 [n, nb * 32] and scales xd [n, nb] as groups: xg [n, ng * 256]
// and xdg [n, ng * 8] (zeros past nb), and for Q4_0 (`q4`) xcg [n, ng * 8], 8 x each block's sum
// of quants (tile8_avx2), in this thread's buffer (NULL when it cannot be had).
static int8_t *group_x(const int8_t *x8, const float *xd, int n, int nb, int q4, float **xdg, int32_t **xcg) {
  static __thread void *buf;
  static __thread size_t cap;
  const int ng = groups8(nb);
  const size_t qbytes = (size_t)n * ng * GROUP;
  const size_t per = (size_t)n * ng * 8;
  int8_t *xg = (int8_t *)thread_buf(&buf, &cap, qbytes + per * (sizeof(float) + sizeof(int32_t)));
  if (!xg) return NULL;
  float *d = (float *)(xg + qbytes);
  int32_t *c = (int32_t *)(d + per);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int t = 0; t < n; t++)
    for (int g = 0; g < ng; g++) {
      const int blocks = nb - 8 * g < 8 ? nb - 8 * g : 8;
      const int8_t *src = x8 + ((size_t)t * nb + 8 * (size_t)g) * 32;
      const size_t at = ((size_t)t * ng + g) * 8;
      group8(src, blocks, xg + at * 32);
      for (int i = 0; i < 8; i++) {
        d[at + i] = i < blocks ? xd[(size_t)t * nb + 8 * g + i] : 0.0f;
        if (!q4) continue;
        int sum = 0;
        if (i < blocks) {
          const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(src + 32 * i))), ones16);
          __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
          h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
          h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
          sum = _mm_cvtsi128_si32(h);
        }
        c[at + i] = 8 * sum;
      }
    }
  *xdg = d;
  *xcg = c;
  return xg;
}

// A tile's weight scales for one group, s [blocks][4] (`blocks` 1..8), as 4 vectors sw[r] with
// lane i block i's scale of row r (0 past `blocks`).
static inline void group_scales(const float *s, int blocks, __m256 sw[4]) {
  if (blocks < 8) {
    float v[4][8] __attribute__((aligned(32)));
    for (int i = 0; i < 8; i++)
      for (int r = 0; r < 4; r++) v[r][i] = i < blocks ? s[4 * i + r] : 0.0f;
    for (int r = 0; r < 4; r++) sw[r] = _mm256_load_ps(v[r]);
    return;
  }
  // each load holds two blocks' 4 rows; two rounds of unpacks leave lanes in block order
  // 0 4 2 6 1 5 3 7, which one permute puts right
  const __m256 l0 = _mm256_loadu_ps(s), l1 = _mm256_loadu_ps(s + 8), l2 = _mm256_loadu_ps(s + 16), l3 = _mm256_loadu_ps(s + 24);
  const __m256 a = _mm256_unpacklo_ps(l0, l1), b = _mm256_unpackhi_ps(l0, l1);
  const __m256 c = _mm256_unpacklo_ps(l2, l3), d = _mm256_unpackhi_ps(l2, l3);
  const __m256i order = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
  sw[0] = _mm256_permutevar8x32_ps(_mm256_unpacklo_ps(a, c), order);
  sw[1] = _mm256_permutevar8x32_ps(_mm256_unpackhi_ps(a, c), order);
  sw[2] = _mm256_permutevar8x32_ps(_mm256_unpacklo_ps(b, d), order);
  sw[3] = _mm256_permutevar8x32_ps(_mm256_unpackhi_ps(b, d), order);
}

// This thread's buffer for one tile's groups (group_tile), NULL when it cannot be had.
static int8_t *tile_groups_buf(int ng) {
  static __thread void *buf;
  static __thread size_t cap;
  return (int8_t *)thread_buf(&buf, &cap, (size_t)ng * 4 * GROUP + (size_t)ng * 32 * sizeof(float));
}

// The 4 rows of a Q8_0 tile, or of a Q4_0 one (`q4`: its nibbles, 0..15, unpacked first), as groups into
// wg: quants [ng][4][256], then their scales [ng][4][8] (returned). The rows (w, rowBytes
// apart; scales s [nb][4]) stream from memory: each is fetched PREFETCH bytes ahead.
static const float *group_tile(const uint8_t *w, size_t rowBytes, const float *s, int nb, int8_t *wg, int q4) {
  const int ng = groups8(nb);
  const size_t span = q4 ? GROUP / 2 : GROUP; // a group's bytes in a row
  float *sg = (float *)(wg + (size_t)ng * 4 * GROUP);
  int8_t unpacked[GROUP] __attribute__((aligned(32)));
  for (int g = 0; g < ng; g++) {
    const int blocks = nb - 8 * g < 8 ? nb - 8 * g : 8;
    for (int r = 0; r < 4; r++) {
      const uint8_t *src = w + r * rowBytes + (size_t)g * span;
      for (size_t l = 0; l < span; l += 64) _mm_prefetch((const char *)(src + PREFETCH + l), _MM_HINT_T0);
      if (q4) {
        for (int i = 0; i < blocks; i++)
          _mm256_store_si256((__m256i *)(unpacked + 32 * i), _mm256_add_epi8(block_q4(src + 16 * i), _mm256_set1_epi8(8)));
        group8(unpacked, blocks, wg + ((size_t)g * 4 + r) * GROUP);
      } else {
        group8((const int8_t *)src, blocks, wg + ((size_t)g * 4 + r) * GROUP);
      }
    }
    __m256 sw[4];
    group_scales(s + 32 * (size_t)g, blocks, sw);
    for (int r = 0; r < 4; r++) _mm256_store_ps(sg + (size_t)g * 32 + r * 8, sw[r]);
  }
  return sg;
}

// The activations' quants (int16 holding -127..127) as int8, once per call and thread rather
// than once per tile, in a buffer of this thread's that grows to the largest call.
static const int8_t *x16_to_i8(const int16_t *x, size_t count) {
  static __thread void *mem;
  static __thread size_t cap;
  int8_t *buf = (int8_t *)thread_buf(&mem, &cap, count);
  if (!buf) return NULL;
  for (size_t i = 0; i + 32 <= count; i += 32) {
    const __m256i v = _mm256_packs_epi16(_mm256_loadu_si256((const __m256i *)(x + i)), _mm256_loadu_si256((const __m256i *)(x + i + 16)));
    // packs interleaves the 128-bit halves: the permute puts the 32 values back in order
    _mm256_store_si256((__m256i *)(buf + i), _mm256_permute4x64_epi64(v, 0xd8));
  }
  return buf;
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
  // (AVX2 builds run tile_avx2 from mm; this is their path only where its buffer cannot be had)
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
#if defined(__AVX2__) && !defined(__AVX512BW__)
  const int8_t *x8 = x16_to_i8((const int16_t *)(m + x16), (size_t)n * cols);
  // from GEMM_TOKENS tokens on: the grouped GEMM (below it, each token keeps the bits of a
  // one-token matvec: tile_avx2 in block order)
  float *xdg = NULL;
  int32_t *xcg = NULL;
  const int8_t *xg = x8 && n >= GEMM_TOKENS ? group_x(x8, (const float *)(m + xd), n, nb, q4, &xdg, &xcg) : NULL;
  int8_t *wg = xg ? tile_groups_buf(groups8(nb)) : NULL;
  if (wg) {
    const int ng = groups8(nb);
    while (claims_take(&claims, &t0, &t1))
      for (int tl = t0; tl < t1; tl++) {
        const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
        const float *sg = group_tile(w, rowBytes, (const float *)(m + ws) + (size_t)tl * nb * 4, nb, wg, q4);
        // the next tile is fetched during this one's last pass, and only when it is this
        // claim's (another thread's would be read twice)
        const uint8_t *next = tl + 1 < t1 ? w + 4 * rowBytes : NULL;
        for (int t = 0; t < n; t += 2) {
          const int8_t *xt = xg + (size_t)t * ng * GROUP;
          const float *dt = xdg + (size_t)t * ng * 8;
          float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
          const uint8_t *nx = t + 2 >= n ? next : NULL;
          const int32_t *ct = xcg + (size_t)t * ng * 8;
          const size_t ds = (size_t)ng * 8, xs2 = (size_t)ng * GROUP;
          const tile8_fn f = q4 ? (n - t >= 2 ? tile8_q4_2 : tile8_q4_1) : (n - t >= 2 ? tile8_q8_2 : tile8_q8_1);
          f(wg, sg, ng, xt, xs2, dt, ct, ds, yt, ystride, nx, rowBytes);
        }
      }
    return;
  }
  if (x8) {
    while (claims_take(&claims, &t0, &t1))
      for (int tl = t0; tl < t1; tl++) {
        const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
        const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
        // the next tile is fetched during this one's last pass only when it is this claim's
        // (another thread's would be read twice)
        const int more = tl + 1 < t1;
        for (int t = 0; t < n; t += 2) {
          const int8_t *xt = x8 + (size_t)t * cols;
          const float *dt = (const float *)(m + xd) + (size_t)t * nb;
          float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
          const int pf = t == 0 ? 1 : more && t + 2 >= n ? 2 : 0;
#define TILE(k, f) tile_avx2(w, rowBytes, s, nb, xt, (size_t)cols, dt, nb, yt, ystride, k, q4, f)
          if (n - t >= 2) {
            if (pf == 1) TILE(2, 1);
            else if (pf == 2) TILE(2, 2);
            else TILE(2, 0);
          } else {
            if (pf == 1) TILE(1, 1);
            else if (pf == 2) TILE(1, 2);
            else TILE(1, 0);
          }
#undef TILE
        }
      }
    return;
  }
#endif
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
