// arm64 (NEON) twin of kquant.c (Q4_K / Q5_K / Q6_K times q8_K activations below
// GEMM_TOKENS: tk_kv_prep, tk_mm_kv) and of gemm-vnni.c's K-quant prefill GEMM (tk_kt_prep,
// tk_mm_kt). Same symbols, arguments and layouts as the x86 files (see there).
//
// Per super-block of 256 the weights are unpacked once into 256 i8 values in element order
// (Q4_K 0..15, Q5_K 0..31, Q6_K -32..31), the integer scale of each 16 and the min of each
// 32; per token, 16 i8 x i8 products at a time (neon.h's dot) times the 16's scale summed in
// i32 lanes, the mins against the activations' 16-sums: exact integers per super-block, as
// llama.cpp's vec_dot_q*_K_q8_K, then d * dx and dmin * dx in f32.
#include "neon.h"

// x16 [n, cols] i16 (quant_q8_k's values, |q| <= 127) -> xq [n, cols] i8 and bs [n, cols/16]
// i16 (each sum |s| <= 16 * 127). Thread tid takes its share of tokens. The NEON kernels read
// every type's activations in element order, so `type` (kquant.c's layout choice) is unused.
void tk_kv_prep(uintptr_t base, uint32_t x16, int n, int cols, uint32_t xq, uint32_t bs, int type, int tid, int nt) {
  (void)type;
  uint8_t *m = (uint8_t *)base;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const int16_t *q = (const int16_t *)(m + x16) + (size_t)t * cols;
    int8_t *o = (int8_t *)(m + xq) + (size_t)t * cols;
    int16_t *s = (int16_t *)(m + bs) + (size_t)t * (cols / 16);
    for (int g = 0; g < cols / 16; g++) {
      const int16x8_t a = vld1q_s16(q + 16 * g), b = vld1q_s16(q + 16 * g + 8);
      vst1q_s8(o + 16 * g, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
      s[g] = (int16_t)vaddvq_s16(vaddq_s16(a, b));
    }
  }
}

// One super-block unpacked: q [256] i8 in element order, sc [16] the scale of each 16, mn [8]
// the min of each 32 (Q4_K/Q5_K; 0 for Q6_K), d and dmin.
typedef struct {
  int8_t q[256];
  int32_t sc[16];
  int32_t mn[8];
  float d, dmin;
} ksb;

static inline void unpack_q45(const uint8_t *p, int five, ksb *s) {
  const uint8_t *sq = p + 4;
  for (int j = 0; j < 4; j++) {
    const int s0 = sq[j] & 63, m0 = sq[j + 4] & 63;
    const int s1 = (sq[j + 8] & 0xf) | ((sq[j] >> 6) << 4), m1 = (sq[j + 8] >> 4) | ((sq[j + 4] >> 6) << 4);
    s->sc[2 * j] = s->sc[2 * j + 1] = s0;
    s->sc[8 + 2 * j] = s->sc[8 + 2 * j + 1] = s1;
    s->mn[j] = m0;
    s->mn[j + 4] = m1;
  }
  s->d = f16(rd16(p));
  s->dmin = f16(rd16(p + 2));
  const uint8_t *qs = p + (five ? 48 : 16);
  const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
  for (int j = 0; j < 4; j++)
    for (int l = 0; l < 32; l += 16) {
      const uint8x16_t v = vld1q_u8(qs + 32 * j + l);
      uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
      if (five) {
        // bit 2j of qh[l] is the fifth bit of element 64j + l, bit 2j + 1 of element 64j + 32 + l
        const uint8x16_t qh = vld1q_u8(p + 16 + l);
        lo = vorrq_u8(lo, vshlq_n_u8(vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * j))), one), 4));
        hi = vorrq_u8(hi, vshlq_n_u8(vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * j - 1))), one), 4));
      }
      vst1q_s8(s->q + 64 * j + l, vreinterpretq_s8_u8(lo));
      vst1q_s8(s->q + 64 * j + 32 + l, vreinterpretq_s8_u8(hi));
    }
}

static inline void unpack_q6(const uint8_t *p, ksb *s) {
  for (int g = 0; g < 16; g++) s->sc[g] = ((const int8_t *)(p + 192))[g];
  for (int j = 0; j < 8; j++) s->mn[j] = 0;
  s->d = f16(rd16(p + 208));
  s->dmin = 0;
  const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3);
  const int8x16_t k32 = vdupq_n_s8(32);
  for (int h = 0; h < 2; h++)
    for (int l = 0; l < 32; l += 16) {
      // ql[64h + l]: low nibble element 128h + l, high nibble 128h + 64 + l; ql[64h + 32 + l]:
      // elements 128h + 32 + l and 128h + 96 + l; qh[32h + l] bits 0-1, 2-3, 4-5, 6-7: their high bits.
      const uint8x16_t a = vld1q_u8(p + 64 * h + l), b = vld1q_u8(p + 64 * h + 32 + l), qh = vld1q_u8(p + 128 + 32 * h + l);
      const uint8x16_t v0 = vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(qh, m3), 4));
      const uint8x16_t v1 = vorrq_u8(vandq_u8(b, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4));
      const uint8x16_t v2 = vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4));
      const uint8x16_t v3 = vorrq_u8(vshrq_n_u8(b, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4));
      vst1q_s8(s->q + 128 * h + l, vsubq_s8(vreinterpretq_s8_u8(v0), k32));
      vst1q_s8(s->q + 128 * h + 32 + l, vsubq_s8(vreinterpretq_s8_u8(v1), k32));
      vst1q_s8(s->q + 128 * h + 64 + l, vsubq_s8(vreinterpretq_s8_u8(v2), k32));
      vst1q_s8(s->q + 128 * h + 96 + l, vsubq_s8(vreinterpretq_s8_u8(v3), k32));
    }
}

// acc += one super-block's contribution for one token: x its 256 i8 values, bs its 16 sums.
static inline float32x4_t sb_dot(const ksb *s, const int8_t *x, const int16_t *bs, float dx, float32x4_t acc) {
  int32x4_t i0 = vdupq_n_s32(0), i1 = vdupq_n_s32(0);
  for (int g = 0; g < 16; g += 2) {
    i0 = vmlaq_n_s32(i0, dot_s8(vdupq_n_s32(0), vld1q_s8(s->q + 16 * g), vld1q_s8(x + 16 * g)), s->sc[g]);
    i1 = vmlaq_n_s32(i1, dot_s8(vdupq_n_s32(0), vld1q_s8(s->q + 16 * g + 16), vld1q_s8(x + 16 * g + 16)), s->sc[g + 1]);
  }
  acc = vfmaq_n_f32(acc, vcvtq_f32_s32(vaddq_s32(i0, i1)), s->d * dx);
  if (s->dmin == 0) return acc;
  int32_t mins = 0;
  for (int j = 0; j < 8; j++) mins += s->mn[j] * (bs[2 * j] + bs[2 * j + 1]);
  // the mins enter lane 0 only: the four lanes are summed at the end
  return vsetq_lane_f32(vgetq_lane_f32(acc, 0) - (float)mins * (s->dmin * dx), acc, 0);
}

// Tokens sharing one pass over a row: the super-block is unpacked once for all of them.
#define KV_TOKENS 8

// Row wr times tokens t0..t0+T-1 (T <= KV_TOKENS) into Y[t * ystride].
static void kv_row(int type, const uint8_t *wr, int nb, int cols, const int8_t *X, const int16_t *BS, const float *XD, int t0, int T, float *Y,
                   size_t ystride) {
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  float32x4_t acc[KV_TOKENS];
  for (int t = 0; t < T; t++) acc[t] = vdupq_n_f32(0);
  for (int b = 0; b < nb; b++) {
    const uint8_t *p = wr + (size_t)b * bytes;
    for (size_t o = 0; o < bytes; o += 64) PREFETCH_R(p + PREFETCH + o);
    ksb s;
    if (type == 14) unpack_q6(p, &s);
    else unpack_q45(p, type == 13, &s);
    for (int t = 0; t < T; t++) {
      const size_t tt = (size_t)(t0 + t);
      acc[t] = sb_dot(&s, X + tt * cols + 256 * (size_t)b, BS + tt * (cols / 16) + 16 * (size_t)b, XD[tt * nb + b], acc[t]);
    }
  }
  for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ystride] = hsum(acc[t]);
}

// y [n, ystride] = x W^T for W's 4-row tiles, taken as this thread gets to them (claims_take);
// type 12 Q4_K, 13 Q5_K, 14 Q6_K; xq, bs from tk_kv_prep, xd quant_q8_k's scales [n, cols/256].
void tk_mm_kv(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xq, uint32_t xd, uint32_t bs, int n, uint32_t y, int ystride,
              int tiles, int tid, int nt) {
  (void)tid;
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  tk_claims claims = claims_open(base, tiles, nt);
  int a, b;
  while (claims_take(&claims, &a, &b))
    for (int r = 4 * a; r < 4 * b; r++)
      for (int t0 = 0; t0 < n; t0 += KV_TOKENS)
        kv_row(type, m + w + (size_t)r * rowBytes, nb, cols, (const int8_t *)(m + xq), (const int16_t *)(m + bs), (const float *)(m + xd), t0,
               n - t0 < KV_TOKENS ? n - t0 : KV_TOKENS, (float *)(m + y) + r, (size_t)ystride);
}

int tk_kv(void) { return 1; }

// ---- K-quant prefill GEMM (tokens across the lanes, as tk_mm_q8t) ---------------------------
// tk_kt_prep: the q8_K activations (x16 [n, cols] i16, xd [n, nb] f32, xs [n, cols/32] i32
// sums) into groups of 15 tokens + a zero token: xt [G][cols/4][16] u32 (q + 128), dxt
// [G][nb][16] f32, bst [G][cols/32][16] f32 (the sums, exact in f32).
void tk_kt_prep(uintptr_t base, uint32_t x16, uint32_t xd, uint32_t xs, int n, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256, ng = cols / 32;
  for (int g = part((n + 14) / 15, tid, nt); g < part((n + 14) / 15, tid + 1, nt); g++) {
    uint32_t *X = (uint32_t *)(m + xt + (size_t)g * cols * 16);
    float *D = (float *)(m + dxt) + (size_t)g * nb * 16;
    float *B = (float *)(m + bst) + (size_t)g * ng * 16;
    for (int lane = 0; lane < 16; lane++) {
      const int t = g * 15 + lane;
      const int zero = lane == 15 || t >= n;
      const int16_t *q = (const int16_t *)(m + x16) + (size_t)(zero ? 0 : t) * cols;
      for (int k = 0; k < cols / 4; k++) {
        uint32_t v = 0x80808080u;
        if (!zero)
          v = (uint32_t)(uint8_t)(q[4 * k] + 128) | ((uint32_t)(uint8_t)(q[4 * k + 1] + 128) << 8) | ((uint32_t)(uint8_t)(q[4 * k + 2] + 128) << 16) |
              ((uint32_t)(uint8_t)(q[4 * k + 3] + 128) << 24);
        X[16 * (size_t)k + lane] = v;
      }
      for (int b = 0; b < nb; b++) D[16 * b + lane] = zero ? 0 : ((const float *)(m + xd))[(size_t)t * nb + b];
      for (int j = 0; j < ng; j++) B[16 * j + lane] = zero ? 0 : (float)((const int32_t *)(m + xs))[(size_t)t * ng + j];
    }
  }
}

// One unpacked row (nb super-blocks) times one group of 15 tokens into y[t * ystride]. Per
// 16-or-32 (Q6_K / Q4_K, Q5_K scale span: sub = 1 or 2 groups of 16) and 4-token quad: lane
// dots over the span, the zero lane taken off, times the integer scale.
static void gemm_kt_row(const ksb *rs, int nb, int sub, const uint8_t *X, const float *D, const float *B, float *y, int ystride, int tokens) {
  float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
  for (int b = 0; b < nb; b++) {
    const ksb *s = rs + b;
    int32x4_t ai[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int g = 0; g < 16; g += sub) {
      const uint8_t *xs = X + 64 * (size_t)(64 * b + 4 * g);
      const int8x16_t w0 = vld1q_s8(s->q + 16 * g);
      int32x4_t p[4];
      for (int q = 0; q < 4; q++) {
        p[q] = dot4k(vdupq_n_s32(0), xs, q, w0);
        if (sub == 2) p[q] = dot4k(p[q], xs + 256, q, vld1q_s8(s->q + 16 * g + 16));
      }
      const int32x4_t zero = vdupq_laneq_s32(p[3], 3);
      for (int q = 0; q < 4; q++) ai[q] = vmlaq_n_s32(ai[q], vsubq_s32(p[q], zero), s->sc[g]);
    }
    for (int q = 0; q < 4; q++) {
      float32x4_t mins = vdupq_n_f32(0);
      if (s->dmin != 0)
        for (int j = 0; j < 8; j++) mins = vfmaq_n_f32(mins, vld1q_f32(B + 16 * (size_t)(8 * b + j) + 4 * q), (float)s->mn[j]);
      const float32x4_t v = vfmsq_n_f32(vmulq_n_f32(vcvtq_f32_s32(ai[q]), s->d), mins, s->dmin);
      acc[q] = vfmaq_f32(acc[q], v, vld1q_f32(D + 16 * (size_t)b + 4 * q));
    }
  }
  float o[16];
  for (int q = 0; q < 4; q++) vst1q_f32(o + 4 * q, acc[q]);
  for (int t = 0; t < tokens; t++) y[(size_t)t * ystride] = o[t];
}

void tk_mm_kt(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int n, uint32_t y, int ystride, int tiles,
              int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 256;
  const size_t bytes = type == 14 ? 210 : type == 13 ? 176 : 144;
  ksb *rs = (ksb *)malloc(sizeof(ksb) * (size_t)nb);
  if (!rs) return;
  for (int r = part(tiles, tid, nt) * 4; r < part(tiles, tid + 1, nt) * 4; r++) {
    // the row unpacked once, then every group of 15 tokens
    for (int b = 0; b < nb; b++) {
      const uint8_t *p = m + w + (size_t)r * rowBytes + (size_t)b * bytes;
      if (type == 14) unpack_q6(p, rs + b);
      else unpack_q45(p, type == 13, rs + b);
    }
    for (int g = 0; g < (n + 14) / 15; g++)
      gemm_kt_row(rs, nb, type == 14 ? 1 : 2, m + xt + (size_t)g * cols * 16, (const float *)(m + dxt) + (size_t)g * nb * 16,
                  (const float *)(m + bst) + (size_t)g * (cols / 32) * 16, (float *)(m + y) + (size_t)g * 15 * ystride + r, ystride,
                  n - 15 * g < 15 ? n - 15 * g : 15);
  }
  free(rs);
}
