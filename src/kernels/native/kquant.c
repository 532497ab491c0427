// K-quant (Q4_K, Q5_K, Q6_K) matvec and few-token matmul on AVX-512 VNNI, below GEMM_TOKENS:
// the activations are quantised once per matmul to q8_K (quant_q8_k: per 256 a f32 scale and
// i8 values) and tk_kv_prep stores them as i8 xq [n, cols] (in the order the weight type's
// unpacking yields, KV_PERM) with i16 sums of each 16 values bs [n, cols/16], as llama.cpp's
// block_q8_K. Weights stay in ggml's raw super-blocks.
//
// Per super-block of 256 the weights are unpacked once into four vectors of 64 unsigned
// quants (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63; AVX2: eight of 32); per vector and token,
// vpmaddubsw multiplies them by the signed activations into i16 pair sums and vpdpwssd
// multiplies those by the integer sub-block scales into i32 lanes. The lanes are summed in
// i32, exact as llama.cpp's vec_dot_q*_K_q8_K:
//   Q4_K / Q5_K: d * dx * sum(sc * dot) - dmin * dx * sum(mn * bsum32)
//   Q6_K:        d * dx * (sum(sc * dot) - 32 * sum(sc * bsum16))   (q - 32 is the weight)
// Every token of a call runs the same arithmetic in the same order as a lone token, so its
// outputs do not depend on how many tokens share the call (batch invariance, types.ts).
#include "kquant.h"

#if defined(__AVX512BW__) || (defined(__AVX2__) && defined(__F16C__))
// Q4_K / Q5_K on AVX-512 read each 64 bytes of quants as two vectors (low nibbles, high
// nibbles), so their activations are stored in that order: per 128 elements 0-31, 64-95, 32-63,
// 96-127 (KV_PERM). AVX2's 32-byte vectors, and Q6_K's, are in element order already.
#if defined(__AVX512BW__)
#define KV_PERM 1
#else
#define KV_PERM 0
#endif

// tk_kv_prep: x16 [n, cols] i16 (quant_q8_k's values, |q| <= 127) -> xq [n, cols] i8 (in the
// order tk_mm_kv reads for the weight type: see KV_PERM) and bs [n, cols/16] i16, the sums of
// each 16 in element order (each |s| <= 16 * 127). Thread tid takes its share of tokens.
void tk_kv_prep(uintptr_t base, uint32_t x16, int n, int cols, uint32_t xq, uint32_t bs, int type, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int perm = KV_PERM && type != 14;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const int16_t *q = (const int16_t *)(m + x16) + (size_t)t * cols;
    int8_t *o = (int8_t *)(m + xq) + (size_t)t * cols;
    int16_t *s = (int16_t *)(m + bs) + (size_t)t * (cols / 16);
    for (int g = 0; g < cols / 16; g++) {
      // element e = 16g + i goes to e with bits 5 and 6 swapped (32-groups 1 and 2 of each 128)
      const int e = 16 * g;
      const int at = perm ? (e & ~0x60) | ((e & 0x20) << 1) | ((e & 0x40) >> 1) : e;
      int sum = 0;
      for (int i = 0; i < 16; i++) {
        o[at + i] = (int8_t)q[e + i];
        sum += q[e + i];
      }
      s[g] = (int16_t)sum;
    }
  }
}

// Tokens sharing one pass over a row: the super-block is unpacked once for all of them.
#define KV_TOKENS 8

#if defined(__AVX512BW__)
// ---- AVX-512: a super-block is four vectors of 64 quants ---------------------------------
#if defined(__AVX512VNNI__)
#define MAC16(acc, p, s) _mm512_dpwssd_epi32(acc, p, s)
#else
#define MAC16(acc, p, s) _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
#endif
typedef __m512 kacc;
static inline kacc kacc_zero(void) { return _mm512_setzero_ps(); }
static inline float kacc_sum(kacc a) { return _mm512_reduce_add_ps(a); }

// One super-block unpacked: q[k] holds the 64 (unsigned) quants that meet xq's values 64k..64k+63
// (element order for Q6_K, the KV_PERM order for Q4_K/Q5_K), sc[k] the i16 scale of each pair of
// them (i16 lane i covers values 64k + 2i, 64k + 2i + 1), mc the 16 i16 factors of the 16-group
// sums (Q4_K/Q5_K: each sub-block's min twice; Q6_K: the 16 scales), d and dmin the f16 factors.
typedef struct {
  __m512i q[4];
  __m512i sc[4];
  __m256i mc;
  float d, dmin;
} ksb;

static inline __attribute__((always_inline)) void unpack_q45(const uint8_t *p, int five, __m128i sm, ksb *s) {
  // Vector k of the quants: the low (k even) or high (k odd) nibbles of bytes 64(k/2)..+63, i.e.
  // sub-blocks a = 4(k/2) + (k&1) in bytes 0-31 and a + 2 in bytes 32-63 (the KV_PERM order).
  // The scales as i16 pairs: z[h] holds in each i16 lane of bytes 0-31 the scales of sub-blocks
  // 4h, 4h + 1 (low byte, high byte), of bytes 32-63 those of 4h + 2, 4h + 3 (vpshufb picks
  // bytes per 128-bit lane of the broadcast); a mask or a shift then leaves one of them.
  const __m512i all = _mm512_broadcast_i32x4(sm);
  const __m512i m8 = _mm512_set1_epi16(0xff);
  for (int h = 0; h < 2; h++) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(((4 * h + 1) << 8) | (4 * h)))),
                                           _mm256_set1_epi16((short)(((4 * h + 3) << 8) | (4 * h + 2))), 1);
    const __m512i z = _mm512_shuffle_epi8(all, idx);
    s->sc[2 * h] = _mm512_and_si512(z, m8);
    s->sc[2 * h + 1] = _mm512_srli_epi16(z, 8);
  }
  // each 16-group's min: bytes 8 + g / 2 zero-extended to i16
  const __m256i dup = _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, 12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14,
                                       -1, 15, -1, 15, -1);
  s->mc = _mm256_shuffle_epi8(_mm512_castsi512_si256(all), dup);
  uint32_t dd32;
  __builtin_memcpy(&dd32, p, 4);
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd32));
  s->d = _mm_cvtss_f32(dd);
  s->dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
  const uint8_t *qs = p + (five ? 48 : 16);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i qh = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16))) : _mm512_setzero_si512();
  for (int h = 0; h < 2; h++) {
    const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * h));
    for (int j = 0; j < 2; j++) {
      __m512i q = _mm512_and_si512(j ? _mm512_srli_epi16(v, 4) : v, m4);
      if (five) {
        // bit a of qh[l] is the fifth bit of element 32a + l
        const int a = 4 * h + j;
        const __m512i bit =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << a))), _mm256_set1_epi8((char)(1 << (a + 2))), 1);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
      }
      s->q[2 * h + j] = q;
    }
  }
}

// q45_scales of super-blocks p, p + bytes, .. (m <= 4 of them) at once, one per 128-bit lane, into
// out[0..m-1]; the lanes past m repeat the first super-block (the loads stay inside the row).
static inline __attribute__((always_inline)) void q45_scales4(const uint8_t *p, size_t bytes, int m, __m128i *out) {
  __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 4)));
  q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + (m > 1 ? bytes : 0) + 4)), 1);
  q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + (m > 2 ? 2 * bytes : 0) + 4)), 2);
  q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + (m > 3 ? 3 * bytes : 0) + 4)), 3);
  const __m512i lo = _mm512_shuffle_epi8(q, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
  const __m512i hi = _mm512_shuffle_epi8(q, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
  const __m512i los = _mm512_mask_blend_epi8(0xf000f000f000f000ull, lo, _mm512_srli_epi16(lo, 4));
  const __m512i low = _mm512_and_si512(los, _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15)));
  _mm512_storeu_si512((void *)out, _mm512_or_si512(low, _mm512_srli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8((char)0xc0)), 2)));
}

static inline __attribute__((always_inline)) void unpack_q6(const uint8_t *p, ksb *s) {
  const __m128i sc8 = _mm_loadu_si128((const __m128i *)(p + 192));
  const __m512i all = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
  for (int k = 0; k < 4; k++) {
    // i16 lanes 8g..8g+7 of vector k are 16-group 4k + g
    const __m512i idx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_setr_epi16(4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1,
                                                 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1)),
        _mm256_setr_epi16(4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3,
                          4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3),
        1);
    s->sc[k] = _mm512_permutexvar_epi16(idx, all);
  }
  s->mc = _mm256_cvtepi8_epi16(sc8);
  s->d = _cvtsh_ss(rd16(p + 208));
  s->dmin = 0;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  for (int h = 0; h < 2; h++) {
    // ql[64h + l]: low nibble element 128h + l (l < 64), high nibble element 128h + 64 + l;
    // qh[32h + l]: bits 0-1, 2-3, 4-5, 6-7 the high bits of elements 128h + l, +32, +64, +96.
    const __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * h));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h)));
    // each pair of high bits shifted straight to bits 4-5 (the 16-bit shifts carry bits across
    // the bytes only outside the 0x30 mask), then (quant & 15) | high in one vpternlog
    const __m512i slo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
    const __m512i shi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi16(qh, slo), m30);
    const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi16(qh, shi), m30);
    s->q[2 * h] = _mm512_ternarylogic_epi32(ql, m4, hlo, 0xea);
    s->q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, hhi, 0xea);
  }
}

// acc += one super-block's contribution for one token: x its 256 i8 values, b its 16 sums.
static inline __attribute__((always_inline)) __m512 sb_dot(int six, const ksb *s, const int8_t *x, const int16_t *b, float dx, __m512 acc) {
  // u8 x i8 pairs into i16 (|sum| <= 2 * 63 * 128: no saturation), then times the i16 scales
  // into i32 lanes (vpdpwssd with VNNI); two chains, joined once.
  __m512i i0 = MAC16(_mm512_setzero_si512(), _mm512_maddubs_epi16(s->q[0], _mm512_loadu_si512((const void *)x)), s->sc[0]);
  __m512i i1 = MAC16(_mm512_setzero_si512(), _mm512_maddubs_epi16(s->q[1], _mm512_loadu_si512((const void *)(x + 64))), s->sc[1]);
  i0 = MAC16(i0, _mm512_maddubs_epi16(s->q[2], _mm512_loadu_si512((const void *)(x + 128))), s->sc[2]);
  i1 = MAC16(i1, _mm512_maddubs_epi16(s->q[3], _mm512_loadu_si512((const void *)(x + 192))), s->sc[3]);
  __m512i isum = _mm512_add_epi32(i0, i1);
  const __m512i mc = _mm512_zextsi256_si512(_mm256_madd_epi16(s->mc, _mm256_loadu_si256((const __m256i *)b)));
  if (six) {
    isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(mc, 5));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(s->d * dx), acc);
  }
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(s->d * dx), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mc), _mm512_set1_ps(s->dmin * dx), acc);
}

#else
// ---- AVX2: a super-block is eight vectors of 32 quants -----------------------------------
#if defined(__FMA__)
#define FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define FNMADD(a, b, c) _mm256_fnmadd_ps(a, b, c)
#else
#define FMADD(a, b, c) _mm256_add_ps(_mm256_mul_ps(a, b), c)
#define FNMADD(a, b, c) _mm256_sub_ps(c, _mm256_mul_ps(a, b))
#endif
typedef __m256 kacc;
static inline kacc kacc_zero(void) { return _mm256_setzero_ps(); }
static inline float kacc_sum(kacc a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

// q[v]: elements 32v..32v+31 (unsigned); sc[v] their i16 scales; mc, d, dmin as with AVX-512.
typedef struct {
  __m256i q[8];
  __m256i sc[8];
  __m256i mc;
  float d, dmin;
} ksb;

// q45_scales of super-blocks p, p + bytes, .. (m <= 4) into out[0..m-1].
static inline __attribute__((always_inline)) void q45_scales4(const uint8_t *p, size_t bytes, int m, __m128i *out) {
  for (int i = 0; i < m; i++) out[i] = q45_scales(p + (size_t)i * bytes);
}

static inline __attribute__((always_inline)) void unpack_q45(const uint8_t *p, int five, __m128i sm, ksb *s) {
  // sc[j]: scale j as 16 i16 lanes (vpshufb: byte j, then a zero byte)
  const __m256i all = _mm256_broadcastsi128_si256(sm);
  for (int j = 0; j < 8; j++) s->sc[j] = _mm256_shuffle_epi8(all, _mm256_set1_epi16((short)(0xff00 | j)));
  const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  s->mc = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(rd16(p) | ((uint32_t)rd16(p + 2) << 16))));
  s->d = _mm_cvtss_f32(dd);
  s->dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
  const uint8_t *qs = p + (five ? 48 : 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
  for (int k = 0; k < 4; k++) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
    }
    s->q[2 * k] = lo;
    s->q[2 * k + 1] = hi;
  }
}

static inline __attribute__((always_inline)) void unpack_q6(const uint8_t *p, ksb *s) {
  const int8_t *sc = (const int8_t *)(p + 192);
  for (int v = 0; v < 8; v++) s->sc[v] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * v + 1]), _mm_set1_epi16(sc[2 * v]));
  s->mc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
  s->d = _cvtsh_ss(rd16(p + 208));
  s->dmin = 0;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; h++) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
    s->q[4 * h] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
    s->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
    s->q[4 * h + 2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
    s->q[4 * h + 3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
  }
}

static inline __attribute__((always_inline)) __m256 sb_dot(int six, const ksb *s, const int8_t *x, const int16_t *b, float dx, __m256 acc) {
  __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
  for (int v = 0; v < 8; v += 2) {
    i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(_mm256_maddubs_epi16(s->q[v], _mm256_loadu_si256((const __m256i *)(x + 32 * v))), s->sc[v]));
    i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(_mm256_maddubs_epi16(s->q[v + 1], _mm256_loadu_si256((const __m256i *)(x + 32 * v + 32))), s->sc[v + 1]));
  }
  __m256i isum = _mm256_add_epi32(i0, i1);
  const __m256i mc = _mm256_madd_epi16(s->mc, _mm256_loadu_si256((const __m256i *)b));
  if (six) {
    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(mc, 5));
    return FMADD(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(s->d * dx), acc);
  }
  acc = FMADD(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(s->d * dx), acc);
  return FNMADD(_mm256_cvtepi32_ps(mc), _mm256_set1_ps(s->dmin * dx), acc);
}
#endif

// Row r of the weights times tokens t0..t0+T-1 (T <= KV_TOKENS).
static inline __attribute__((always_inline)) void kv_row(int type, const uint8_t *wr, size_t bytes, int nb, int cols, const int8_t *X, const int16_t *BS,
                                                         const float *XD, int t0, int T, float *Y, size_t ystride) {
  kacc acc[KV_TOKENS];
  for (int t = 0; t < T; t++) acc[t] = kacc_zero();
  // Q4_K / Q5_K: the scales and mins of four super-blocks decoded together
  for (int b0 = 0; b0 < nb; b0 += (type == 14 ? 1 : 4)) {
    const int m = type == 14 ? 1 : nb - b0 < 4 ? nb - b0 : 4;
    __m128i sm[4];
    if (type != 14) q45_scales4(wr + (size_t)b0 * bytes, bytes, m, sm);
    for (int i = 0; i < m; i++) {
      const int b = b0 + i;
      const uint8_t *p = wr + (size_t)b * bytes;
      // Far software prefetch of the weight stream (as mm_q8v's).
      for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PREFETCH + o, _MM_HINT_T0);
      ksb s;
      if (type == 14) unpack_q6(p, &s);
      else unpack_q45(p, type == 13, sm[i], &s);
      for (int t = 0; t < T; t++) {
        const size_t tt = (size_t)(t0 + t);
        acc[t] = sb_dot(type == 14, &s, X + tt * cols + 256 * (size_t)b, BS + tt * (cols / 16) + 16 * (size_t)b, XD[tt * nb + b], acc[t]);
      }
    }
  }
  for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ystride] = kacc_sum(acc[t]);
}

// A row's super-blocks unpacked into out[0..nb).
static inline __attribute__((always_inline)) void kv_unpack_row(int type, const uint8_t *wr, size_t bytes, int nb, ksb *out) {
  for (int b0 = 0; b0 < nb; b0 += (type == 14 ? 1 : 4)) {
    const int m = type == 14 ? 1 : nb - b0 < 4 ? nb - b0 : 4;
    __m128i sm[4];
    if (type != 14) q45_scales4(wr + (size_t)b0 * bytes, bytes, m, sm);
    for (int i = 0; i < m; i++) {
      const uint8_t *p = wr + (size_t)(b0 + i) * bytes;
      for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PREFETCH + o, _MM_HINT_T0);
      if (type == 14) unpack_q6(p, &out[b0 + i]);
      else unpack_q45(p, type == 13, sm[i], &out[b0 + i]);
    }
  }
}

// kv_row on a row unpacked by kv_unpack_row: the same arithmetic in the same order.
static inline __attribute__((always_inline)) void kv_row_unpacked(int type, const ksb *row, int nb, int cols, const int8_t *X, const int16_t *BS,
                                                                  const float *XD, int t0, int T, float *Y, size_t ystride) {
  kacc acc[KV_TOKENS];
  for (int t = 0; t < T; t++) acc[t] = kacc_zero();
  for (int b = 0; b < nb; b++)
    for (int t = 0; t < T; t++) {
      const size_t tt = (size_t)(t0 + t);
      acc[t] = sb_dot(type == 14, &row[b], X + tt * cols + 256 * (size_t)b, BS + tt * (cols / 16) + 16 * (size_t)b, XD[tt * nb + b], acc[t]);
    }
  for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ystride] = kacc_sum(acc[t]);
}

#if !defined(__AVX512BW__)
// Two unpacked rows (ra, rb) times tokens t0..t0+3 (AVX2): each (row, token) gets
// kv_row_unpacked's arithmetic, its i32 sums added in another order (exact) and its float steps
// the same, so the same bits. A step loads 4 token vectors and 2 rows' quants and scales for 8
// products, where a row with a token at a time loads 3 vectors for each: the loads, not the
// multiplies, bounded that.
static inline __attribute__((always_inline)) void kv_tile2x4(int six, const ksb *ra, const ksb *rb, int nb, int cols, const int8_t *X,
                                                             const int16_t *BS, const float *XD, int t0, float *Y, size_t ystride) {
  kacc acc[2][4];
  for (int r = 0; r < 2; r++)
    for (int t = 0; t < 4; t++) acc[r][t] = kacc_zero();
  for (int b = 0; b < nb; b++) {
    const ksb *s[2] = {ra + b, rb + b};
    const int8_t *x = X + (size_t)t0 * cols + 256 * (size_t)b;
    __m256i is[2][4];
    for (int r = 0; r < 2; r++)
      for (int t = 0; t < 4; t++) is[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int v = 0; v < 8; v++) {
      __m256i xv[4];
      for (int t = 0; t < 4; t++) xv[t] = _mm256_loadu_si256((const __m256i *)(x + (size_t)t * cols + 32 * v));
      for (int r = 0; r < 2; r++) {
        const __m256i q = s[r]->q[v], sc = s[r]->sc[v];
        for (int t = 0; t < 4; t++) is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv[t]), sc));
      }
    }
    for (int t = 0; t < 4; t++) {
      const size_t tt = (size_t)(t0 + t);
      const float dx = XD[tt * nb + b];
      const __m256i bs = _mm256_loadu_si256((const __m256i *)(BS + tt * (cols / 16) + 16 * (size_t)b));
      for (int r = 0; r < 2; r++) {
        const __m256i mc = _mm256_madd_epi16(s[r]->mc, bs);
        if (six) {
          acc[r][t] = FMADD(_mm256_cvtepi32_ps(_mm256_sub_epi32(is[r][t], _mm256_slli_epi32(mc, 5))), _mm256_set1_ps(s[r]->d * dx), acc[r][t]);
        } else {
          acc[r][t] = FMADD(_mm256_cvtepi32_ps(is[r][t]), _mm256_set1_ps(s[r]->d * dx), acc[r][t]);
          acc[r][t] = FNMADD(_mm256_cvtepi32_ps(mc), _mm256_set1_ps(s[r]->dmin * dx), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < 4; t++)
    for (int r = 0; r < 2; r++) Y[(size_t)(t0 + t) * ystride + r] = kacc_sum(acc[r][t]);
}
#endif

// This thread's buffer for one row's unpacked super-blocks, grown to the widest row; NULL
// when it cannot be had (the caller unpacks as it goes).
static ksb *kv_row_buffer(int nb) {
  static __thread void *buf;
  static __thread size_t cap;
  return (ksb *)thread_buf(&buf, &cap, (size_t)nb * sizeof(ksb));
}

static inline __attribute__((always_inline)) void kv_rows(int type, const uint8_t *w, int rowBytes, int cols, const int8_t *X, const int16_t *BS, const float *XD, int n, float *Y, int ystride,
                    int r0, int r1) {
  const int nb = cols / 256;
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  // more than one group of tokens: each row is unpacked once into a buffer, not once a group;
  // one group (decode) unpacks each super-block as it reads it, between its dots (a row
  // unpacked whole first decoded slower: docs/kernels.md)
#if defined(__AVX512BW__)
  ksb *unpacked = n > KV_TOKENS ? kv_row_buffer(nb) : NULL;
#else
  // AVX2, from KV_TOKENS tokens on (a decode batch of 8 included; below it the unpacking
  // costs about what the pairing saves): two rows at a time (kv_tile2x4), four tokens a pass;
  // the tokens past a multiple of 4 as one row at a time
  ksb *unpacked = n >= KV_TOKENS ? kv_row_buffer(2 * nb) : NULL;
  if (unpacked) {
    const int n4 = n / 4 * 4;
    for (int r = r0; r < r1; r += 2) {
      const int pair = r + 1 < r1;
      kv_unpack_row(type, w + (size_t)r * rowBytes, bytes, nb, unpacked);
      if (pair) kv_unpack_row(type, w + (size_t)(r + 1) * rowBytes, bytes, nb, unpacked + nb);
      for (int i = 0; i < 1 + pair; i++) {
        const ksb *row = unpacked + (size_t)i * nb;
        for (int t0 = pair ? n4 : 0; t0 < n; t0 += KV_TOKENS) {
          const int T = n - t0 < KV_TOKENS ? n - t0 : KV_TOKENS;
          switch (T) {
#define KV_CASE(c) case c: kv_row_unpacked(type, row, nb, cols, X, BS, XD, t0, c, Y + r + i, (size_t)ystride); break;
            KV_CASE(1) KV_CASE(2) KV_CASE(3) KV_CASE(4) KV_CASE(5) KV_CASE(6) KV_CASE(7) default: KV_CASE(8)
#undef KV_CASE
          }
        }
      }
      if (pair)
        for (int t0 = 0; t0 < n4; t0 += 4) kv_tile2x4(type == 14, unpacked, unpacked + nb, nb, cols, X, BS, XD, t0, Y + r, (size_t)ystride);
    }
    return;
  }
#endif
  for (int r = r0; r < r1; r++) {
    const uint8_t *wr = w + (size_t)r * rowBytes;
    if (unpacked) {
      kv_unpack_row(type, wr, bytes, nb, unpacked);
      for (int t0 = 0; t0 < n; t0 += KV_TOKENS) {
        const int T = n - t0 < KV_TOKENS ? n - t0 : KV_TOKENS;
        switch (T) {
#define KV_CASE(c) case c: kv_row_unpacked(type, unpacked, nb, cols, X, BS, XD, t0, c, Y + r, (size_t)ystride); break;
          KV_CASE(1) KV_CASE(2) KV_CASE(3) KV_CASE(4) KV_CASE(5) KV_CASE(6) KV_CASE(7) default: KV_CASE(8)
#undef KV_CASE
        }
      }
      continue;
    }
    for (int t0 = 0; t0 < n; t0 += KV_TOKENS) {
      const int T = n - t0 < KV_TOKENS ? n - t0 : KV_TOKENS;
      // T as a constant in each instance, so the accumulators stay in registers
      switch (T) {
#define KV_CASE(c) case c: kv_row(type, wr, bytes, nb, cols, X, BS, XD, t0, c, Y + r, (size_t)ystride); break;
        KV_CASE(1) KV_CASE(2) KV_CASE(3) KV_CASE(4) KV_CASE(5) KV_CASE(6) KV_CASE(7) default: KV_CASE(8)
#undef KV_CASE
      }
    }
  }
}

// y [n, ystride] = x W^T for W's 4-row tiles, taken as this thread gets to them (claims_take);
// type 12 Q4_K, 13 Q5_K, 14 Q6_K; xq, bs from tk_kv_prep, xd quant_q8_k's scales [n, cols/256].
void tk_mm_kv(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xq, uint32_t xd, uint32_t bs, int n, uint32_t y, int ystride,
              int tiles, int tid, int nt) {
  (void)tid;
  uint8_t *m = (uint8_t *)base;
  const int8_t *X = (const int8_t *)(m + xq);
  const int16_t *BS = (const int16_t *)(m + bs);
  const float *XD = (const float *)(m + xd);
  float *Y = (float *)(m + y);
  tk_claims claims = claims_open(base, tiles, nt);
  int t0, t1;
  while (claims_take(&claims, &t0, &t1)) {
    // one instance per type, so the unpacking is specialised
    if (type == 12) kv_rows(12, m + w, rowBytes, cols, X, BS, XD, n, Y, ystride, 4 * t0, 4 * t1);
    else if (type == 13) kv_rows(13, m + w, rowBytes, cols, X, BS, XD, n, Y, ystride, 4 * t0, 4 * t1);
    else kv_rows(14, m + w, rowBytes, cols, X, BS, XD, n, Y, ystride, 4 * t0, 4 * t1);
  }
}

int tk_kv(void) { return 1; }
#else
int tk_kv(void) { return 0; }
#endif
