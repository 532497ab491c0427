// The arm64 build's helpers (kernels-neon.c, ops-neon.c, gemm-neon.c, kquant-neon.c,
// q4-neon.c): the integer dot products the kernels are written on, chosen at build time from
// the compiler's target features, so the kernels themselves carry no #ifdefs:
//   - FEAT_DotProd (__ARM_FEATURE_DOTPROD; Apple M1 on, Graviton 2 on): SDOT, 16 i8 x i8
//     products summed by 4 into i32 lanes per instruction;
//   - FEAT_I8MM (__ARM_FEATURE_MATMUL_INT8; Apple M2 on, Graviton 3 on): USDOT, u8 x i8, the
//     same instruction shape as x86's VNNI vpdpbusd, so the prefill GEMMs take the x86 design
//     whole (activations as q + 128, a zero token whose lane carries 128 * sum(w));
//   - plain NEON (every AArch64 CPU): SMULL / SADDLP / ADDP give the same sums.
// All three are exact integer sums, so every variant gives the same bits.
#ifndef TK_NEON_H
#define TK_NEON_H
#include "common.h"

// acc[i] += sum_{j < 4} a[4i + j] * b[4i + j] (i8 x i8; |a|, |b| <= 128: no overflow).
static inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

// acc[i] += sum_{j < 4} (xu[4i + j] - 128) * w[4i + j]: activations stored as q + 128 (u8).
// With I8MM: USDOT on the u8 values, and 128 * sum(w) is taken off by the caller (the
// zero-token lane of the GEMMs); otherwise the u8 values are turned back into i8 here, the
// zero token's lane comes out 0 and taking it off changes nothing.
#if defined(__ARM_FEATURE_MATMUL_INT8)
static inline int32x4_t dot_u8s8(int32x4_t acc, uint8x16_t xu, int8x16_t w) { return vusdotq_s32(acc, xu, w); }
#else
static inline int32x4_t dot_u8s8(int32x4_t acc, uint8x16_t xu, int8x16_t w) {
  return dot_s8(acc, vreinterpretq_s8_u8(veorq_u8(xu, vdupq_n_u8(0x80))), w);
}
#endif

// u8 quants stored as q + 128 -> i8 q.
static inline int8x16_t unbias(uint8x16_t xu) { return vreinterpretq_s8_u8(veorq_u8(xu, vdupq_n_u8(0x80))); }

// acc[i] += sum_j (xu[4i + j] - 128) * w[4l + j]: weight group l (0..3, a constant) times four
// tokens' groups of 4 (the GEMMs' tokens-across-lanes layout), with the same bias rule as
// dot_u8s8 (the zero token's lane carries 128 * sum(w) with I8MM, 0 otherwise).
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define DOT_LANE(acc, xu, w, l) vusdotq_laneq_s32(acc, xu, w, l)
#elif defined(__ARM_FEATURE_DOTPROD)
#define DOT_LANE(acc, xu, w, l) vdotq_laneq_s32(acc, unbias(xu), w, l)
#else
#define DOT_LANE(acc, xu, w, l) dot_s8(acc, unbias(xu), vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(w), l)))
#endif

// Tokens 4q..4q+3 of a 16-lane group times 4 consecutive weight groups w (16 i8): X points at
// the first group's 16 lanes (64 bytes per group of 4 quants), acc gets the 4 tokens' sums.
static inline int32x4_t dot4k(int32x4_t acc, const uint8_t *X, int q, int8x16_t w) {
  acc = DOT_LANE(acc, vld1q_u8(X + 16 * q), w, 0);
  acc = DOT_LANE(acc, vld1q_u8(X + 64 + 16 * q), w, 1);
  acc = DOT_LANE(acc, vld1q_u8(X + 128 + 16 * q), w, 2);
  acc = DOT_LANE(acc, vld1q_u8(X + 192 + 16 * q), w, 3);
  return acc;
}

// 16 Q4_0 bytes -> the block's 32 weights in element order (low nibbles 0-15, high 16-31), minus 8.
static inline void q4_block(const uint8_t *p, int8x16_t *lo, int8x16_t *hi) {
  const uint8x16_t v = vld1q_u8(p);
  const int8x16_t eight = vdupq_n_s8(8);
  *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), eight);
  *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
}

// Sum of the four lanes.
static inline float hsum(float32x4_t v) { return vaddvq_f32(v); }
#endif
