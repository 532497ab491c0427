// Shared by the K-quant kernels on x86 (kquant.c: decode, kquant-gemm.c: prefill GEMM): the
// Q4_K / Q5_K scale and min decoding.
#ifndef TK_KQUANT_H
#define TK_KQUANT_H
#include "common.h"

#if defined(__AVX2__) || defined(__AVX512BW__)
// The 12 bytes of 6-bit scales and mins at p + 4 of a Q4_K / Q5_K super-block -> bytes 0-7 the
// scales, 8-15 the mins (ggml's get_scale_min_k4): for j < 4 scale q[j] & 63, min q[j + 4] & 63;
// for j >= 4 scale (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, min (q[j + 4] >> 4) | (q[j] >> 6) << 4.
// The 16-byte load reads 4 bytes past the scales (the quants that follow), which no lane uses.
static inline __attribute__((always_inline)) __m128i q45_scales(const uint8_t *p) {
  const __m128i q = _mm_loadu_si128((const __m128i *)(p + 4));
  const __m128i lo = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i hi = _mm_shuffle_epi8(q, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  // bytes 12-15 take the high nibble (a 16-bit shift; the bits it carries over are masked off)
  const __m128i sel = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1);
  const __m128i los = _mm_blendv_epi8(lo, _mm_srli_epi16(lo, 4), sel);
  const __m128i low = _mm_and_si128(los, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  return _mm_or_si128(low, _mm_srli_epi16(_mm_and_si128(hi, _mm_set1_epi8((char)0xc0)), 2));
}
#endif
#endif
