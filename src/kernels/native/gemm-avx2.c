// Q8_0 / Q4_0 on AVX2 builds without AVX-512 (Zen 1-3, Intel before Ice Lake): the weights are
// re-laid once at upload into groups of 8 blocks, and one kernel takes any number of tokens;
// see docs/kernels.md.
//
// The grouped layout. A weight of rowsPad rows is cut into 4-row tiles, a row into
// ng = ceil(nb / 8) groups of 8 blocks (256 columns). Tile `tl`, group g holds
//   Q8_0: wq + (tl * ng + g) * 1024: [4 rows][8 vectors j][8 lanes i][4] i8, byte c of lane i of
//         vector j = quant 4j + c of block 8g + i;
//   Q4_0: wq + (tl * ng + g) * 512: [4 rows][4 vectors j][8 lanes i][4] u8 = byte 4j + c of
//         block 8g + i's 16 quant bytes as ggml stores them (low nibble: quant 4j + c, high
//         nibble: quant 16 + 4j + c, each + 8);
//   scales ws + (tl * ng + g) * 128: [4 rows][8 lanes] f32, lane i block 8g + i's scale.
// Blocks past nb and rows past the weight's rows are zeros with zero scales.
//
// The activations (tk_q8g_prep) are quantised as quant_q8_0 (wasm) and llama.cpp quantise
// them (d = f16(amax / 127), q = round-even(x * 127 / amax)) into the same group order:
// xq [n][ng][8 j][8 i][4] i8, then dx: scales [n][ng * 8] f32, then [n][ng * 8] i32, 8 x each
// block's sum of quants (for Q4_0; zeros past nb).
//
// One group of one row and token: lane i of maddubs+madd of vector j holds 4 products of block
// i, so the 8 vectors' sums give lane i its block's exact i32 dot; one cvt and one fma by the 8
// blocks' (weight scale x token scale) take the whole group, acc = fma(f32(dot), sw * dx, acc),
// and the 8 lanes are summed once at the end. A (row, token) result depends on nothing else in
// the call and runs the same instructions at any n: a token gets the same bits alone, in a
// decode batch and in a prefill of any length, on any thread split.
#include "common.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(__AVX512BW__)
int tk_grouped(void) { return 1; }

#define GROUP 256
static inline int groups8(int nb) { return (nb + 7) / 8; }

static inline float sum8(__m256 a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

// 8 blocks of 32 bytes at `src` as one group at `dst` (vector j, lane i: dword j of block i):
// an 8 x 8 transpose of dwords.
static inline void group8(const int8_t *src, int8_t *dst) {
  __m256i v[8], t[8], u[8];
  for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_si256((const __m256i *)(src + 32 * i));
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
    _mm256_storeu_si256((__m256i *)(dst + 32 * k), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
    _mm256_storeu_si256((__m256i *)(dst + 32 * (k + 4)), _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
  }
}

// One block of 32 floats: its 32 quants into q, their sum into *sum; returns its scale.
static inline float quant_block(const float *xb, int8_t q[32], int32_t *sum) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; k++) {
    v[k] = _mm256_loadu_ps(xb + 8 * k);
    m = _mm256_max_ps(m, _mm256_and_ps(v[k], absmask));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const __m256 id = _mm256_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
  __m256i i[4];
  for (int k = 0; k < 4; k++)
    i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *sum = _mm_cvtsi128_si32(s4);
  // the packs work within 128-bit halves: dword k of their result holds 4 quants of i[k % 4]
  // (its low half for k < 4, else its high half); the permute puts them in element order
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return round_f16(amax / 127.0f);
}

// x [n, cols] f32 -> xq, dx (see the top); threads split the tokens.
void tk_q8g_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xq, uint32_t dx, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int ng = groups8(nb);
  float *d = (float *)(m + dx);
  int32_t *c = (int32_t *)(d + (size_t)n * ng * 8);
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *xt = (const float *)(m + x) + (size_t)t * cols;
    for (int g = 0; g < ng; g++) {
      int8_t q[GROUP] __attribute__((aligned(32)));
      const size_t at = ((size_t)t * ng + g) * 8;
      for (int i = 0; i < 8; i++) {
        const int b = 8 * g + i;
        int32_t sum = 0;
        if (b < nb) {
          d[at + i] = quant_block(xt + 32 * (size_t)b, q + 32 * i, &sum);
        } else {
          d[at + i] = 0.0f;
          _mm256_store_si256((__m256i *)(q + 32 * i), _mm256_setzero_si256());
        }
        c[at + i] = 8 * sum;
      }
      group8(q, (int8_t *)(m + xq) + at * 32);
    }
  }
}

// Raw ggml rows at src (Q8_0: 34 bytes a block, f16 scale then 32 quants; Q4_0: 18, f16 scale
// then 16 bytes) -> rows r0..r0+rows-1 of the grouped layout; r0 is a multiple of 4, and a
// tile the rows leave short (the weight's last) gets zero rows. Threads split the tiles.
static void repack(uint8_t *m, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt, int q4) {
  const int nb = cols / 32;
  const int ng = groups8(nb);
  const size_t blockBytes = q4 ? 18 : 34, qbytes = q4 ? 16 : 32, rbytes = q4 ? 128 : 256;
  const int tiles = (rows + 3) / 4;
  for (int tt = part(tiles, tid, nt); tt < part(tiles, tid + 1, nt); tt++) {
    const size_t tl = (size_t)r0 / 4 + tt;
    for (int g = 0; g < ng; g++) {
      uint8_t *dst = m + wq + (tl * ng + g) * 4 * rbytes;
      float *sc = (float *)(m + ws) + (tl * ng + g) * 32;
      for (int rr = 0; rr < 4; rr++) {
        const int i = 4 * tt + rr;
        uint8_t q[GROUP] __attribute__((aligned(32)));
        for (int k = 0; k < 8; k++) {
          const int b = 8 * g + k;
          if (i < rows && b < nb) {
            const uint8_t *blk = m + src + ((size_t)i * nb + b) * blockBytes;
            __builtin_memcpy(q + qbytes * k, blk + 2, qbytes);
            sc[8 * rr + k] = f16(rd16(blk));
          } else {
            __builtin_memset(q + qbytes * k, 0, qbytes);
            sc[8 * rr + k] = 0.0f;
          }
        }
        uint8_t *row = dst + rr * rbytes;
        if (!q4) {
          group8((const int8_t *)q, (int8_t *)row);
          continue;
        }
        // vector j, lane i: dword j of block i's 16 bytes
        for (int j = 0; j < 4; j++)
          for (int k = 0; k < 8; k++) __builtin_memcpy(row + 32 * j + 4 * k, q + 16 * k + 4 * j, 4);
      }
    }
  }
}

void tk_repack_q8g(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt) {
  repack((uint8_t *)base, src, rows, r0, cols, wq, ws, tid, nt, 0);
}

void tk_repack_q4g(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt) {
  repack((uint8_t *)base, src, rows, r0, cols, wq, ws, tid, nt, 1);
}

// One 4-row tile (wg, sg: its first group) times nt (1 or 2, a constant where it is inlined)
// tokens (xg, dxg, cxg: their first group; the second token xstride / dstride further). With
// `pf`, the bytes at pf + (a group's offset) are fetched as each group is computed.
static inline __attribute__((always_inline)) void tile(const uint8_t *wg, const float *sg, int ng, const int8_t *xg,
                                                       size_t xstride, const float *dxg, const int32_t *cxg,
                                                       size_t dstride, float *y, int ystride, const int nt,
                                                       const int q4, const uint8_t *pf) {
  const size_t gbytes = q4 ? 512 : 1024;
  __m256 acc[4][2];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const int8_t *x0 = xg, *x1 = xg + (nt > 1 ? xstride : 0);
  const float *d0 = dxg, *d1 = dxg + (nt > 1 ? dstride : 0);
  const int32_t *c0 = cxg, *c1 = cxg + (nt > 1 ? dstride : 0);
  for (int g = 0; g < ng; g++, wg += gbytes, sg += 32, x0 += GROUP, x1 += GROUP, d0 += 8, d1 += 8, c0 += 8, c1 += 8) {
    if (pf)
      for (size_t l = 0; l < gbytes; l += 64) _mm_prefetch((const char *)(pf + (size_t)g * gbytes + l), _MM_HINT_T0);
    __m256i is[4][2];
    for (int r = 0; r < 4; r++)
      for (int t = 0; t < nt; t++) is[r][t] = _mm256_setzero_si256();
    if (q4) {
      // raw nibbles (0..15) times x: a pair of products is at most 2 * 15 * 127 in size, the
      // group's 8 pairs 30,480, so they add up in i16 and widen once; 8 * (the block's x sum)
      // then takes the nibbles' offset of 8 back off. Low nibbles meet x vector j, high ones
      // vector j + 4. (The loops stay rolled: unrolled, GCC computed all of a group's products
      // ahead of their sums and spilled them.)
#pragma GCC unroll 1
      for (int h = 0; h < 2; h++) {
#pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
          __m256i xq[2];
          xq[0] = _mm256_loadu_si256((const __m256i *)(x0 + 32 * (j + 4 * h)));
          if (nt > 1) xq[1] = _mm256_loadu_si256((const __m256i *)(x1 + 32 * (j + 4 * h)));
          for (int r = 0; r < 4; r++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(wg + r * 128 + 32 * j));
            const __m256i q = _mm256_and_si256(h ? _mm256_srli_epi16(p, 4) : p, low);
            for (int t = 0; t < nt; t++) is[r][t] = _mm256_add_epi16(is[r][t], _mm256_maddubs_epi16(q, xq[t]));
          }
        }
      }
      const __m256i off0 = _mm256_loadu_si256((const __m256i *)c0);
      const __m256i off1 = nt > 1 ? _mm256_loadu_si256((const __m256i *)c1) : off0;
      for (int r = 0; r < 4; r++) {
        is[r][0] = _mm256_sub_epi32(_mm256_madd_epi16(is[r][0], ones), off0);
        if (nt > 1) is[r][1] = _mm256_sub_epi32(_mm256_madd_epi16(is[r][1], ones), off1);
      }
    } else {
      // maddubs(|w|, x * sign(w)): 16 exact i16 sums of two products (|w| <= 128, |x| <= 127),
      // widened by madd every step
#pragma GCC unroll 1
      for (int j = 0; j < 8; j++) {
        __m256i xq[2];
        xq[0] = _mm256_loadu_si256((const __m256i *)(x0 + 32 * j));
        if (nt > 1) xq[1] = _mm256_loadu_si256((const __m256i *)(x1 + 32 * j));
        for (int r = 0; r < 4; r++) {
          const __m256i q = _mm256_loadu_si256((const __m256i *)(wg + r * GROUP + 32 * j));
          const __m256i aw = _mm256_sign_epi8(q, q);
          for (int t = 0; t < nt; t++)
            is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[t], q)), ones));
        }
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

// `tile` for each token count and weight type, each compiled on its own: inlined into mm, with
// mm's own values live around it, its accumulators were spilled inside the group loop.
typedef void (*tile_fn)(const uint8_t *, const float *, int, const int8_t *, size_t, const float *, const int32_t *,
                        size_t, float *, int, const uint8_t *);
#define TILE(name, nt, q4)                                                                                            \
  static __attribute__((noinline)) void name(const uint8_t *wg, const float *sg, int ng, const int8_t *xg, size_t xs, \
                                             const float *dxg, const int32_t *cxg, size_t ds, float *y, int ystride,  \
                                             const uint8_t *pf) {                                                     \
    tile(wg, sg, ng, xg, xs, dxg, cxg, ds, y, ystride, nt, q4, pf);                                                   \
  }
TILE(tile_q8_1, 1, 0)
TILE(tile_q8_2, 2, 0)
TILE(tile_q4_1, 1, 1)
TILE(tile_q4_2, 2, 1)
#undef TILE

// All tiles times n tokens (xq, dx from tk_q8g_prep), two tokens a pass over a tile. The first
// pass streams the tile from memory, fetched PREFETCH bytes ahead (the stream runs on into the
// next tile); with more passes the last one fetches the next tile when it is this claim's.
static void mm(uint8_t *m, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dx, int n, uint32_t y, int ystride,
               int tiles, int nt, int q4) {
  const int ng = groups8(cols / 32);
  const size_t tbytes = (size_t)ng * (q4 ? 512 : 1024);
  const int8_t *xg = (const int8_t *)(m + xq);
  const float *dxg = (const float *)(m + dx);
  const int32_t *cxg = (const int32_t *)(dxg + (size_t)n * ng * 8);
  const size_t xstride = (size_t)ng * GROUP, dstride = (size_t)ng * 8;
  tk_claims claims = claims_open((uintptr_t)m, tiles, nt);
  int t0, t1;
  while (claims_take(&claims, &t0, &t1))
    for (int tl = t0; tl < t1; tl++) {
      const uint8_t *wg = m + wq + (size_t)tl * tbytes;
      const float *sg = (const float *)(m + ws) + (size_t)tl * ng * 32;
      for (int t = 0; t < n; t += 2) {
        const uint8_t *pf = t == 0 ? wg + PREFETCH : t + 2 >= n && tl + 1 < t1 ? wg + tbytes : NULL;
        const tile_fn f = q4 ? (n - t >= 2 ? tile_q4_2 : tile_q4_1) : (n - t >= 2 ? tile_q8_2 : tile_q8_1);
        f(wg, sg, ng, xg + t * xstride, xstride, dxg + t * dstride, cxg + t * dstride, dstride,
          (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl, ystride, pf);
      }
    }
}

void tk_mm_q8g(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dx, int n, uint32_t y, int ystride,
               int tiles, int tid, int nt) {
  (void)tid;
  mm((uint8_t *)base, wq, ws, cols, xq, dx, n, y, ystride, tiles, nt, 0);
}

void tk_mm_q4g(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dx, int n, uint32_t y, int ystride,
               int tiles, int tid, int nt) {
  (void)tid;
  mm((uint8_t *)base, wq, ws, cols, xq, dx, n, y, ystride, tiles, nt, 1);
}
#else
int tk_grouped(void) { return 0; }
#endif
