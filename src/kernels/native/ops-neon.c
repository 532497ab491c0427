// arm64 (NEON) twin of ops.c: attention, SwiGLU, RMSNorm and RoPE (RMSNorm and RoPE
// bit-identical to the reference), same symbols and layouts as the x86 file.
#include "neon.h"
#include <math.h>

// e^x for 4 lanes: Cephes' expf polynomial on x - n ln2, scaled by 2^n (max error ~2 ulp, as
// ops.c's exp16); 0 far below, inf above. 2^n is applied in two halves so that every factor
// is a normal float (n spans -149..128).
static inline float32x4_t exp4(float32x4_t x) {
  x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.72283935546875f)), vdupq_n_f32(-103.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
  y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, r);
  y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, r);
  y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, r);
  y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, r);
  y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, r);
  y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), y, vmulq_f32(r, r));
  const int32x4_t ni = vcvtq_s32_f32(n);
  const int32x4_t n1 = vshrq_n_s32(ni, 1);
  const int32x4_t n2 = vsubq_s32(ni, n1);
  const float32x4_t p1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
  const float32x4_t p2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
  return vmulq_f32(vmulq_f32(y, p1), p2);
}

// 4 values of a K or V row from lane i on (f16 when half), zero past `left` values.
static inline float32x4_t load_kv4(const uint8_t *p, int half, int left) {
  if (left >= 4) return half ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p))) : vld1q_f32((const float *)p);
  float v[4] = {0, 0, 0, 0};
  for (int i = 0; i < left; i++) v[i] = half ? f16(rd16(p + 2 * i)) : ((const float *)p)[i];
  return vld1q_f32(v);
}

// Softmax of scores[0..len) in place (max, e^(s - max) summed in f64 as llama.cpp); returns 1 / sum.
static inline float softmax_scores(float *scores, int len) {
  float mx = -INFINITY;
  for (int p = 0; p < len; p++) mx = scores[p] > mx ? scores[p] : mx;
  const float32x4_t vmx = vdupq_n_f32(mx);
  float64x2_t sum = vdupq_n_f64(0);
  for (int p = 0; p < len; p += 4) {
    const int left = len - p;
    float v[4] = {mx, mx, mx, mx};
    for (int i = 0; i < 4 && i < left; i++) v[i] = scores[p + i];
    float32x4_t e = exp4(vsubq_f32(vld1q_f32(v), vmx));
    if (left < 4) {
      float o[4];
      vst1q_f32(o, e);
      for (int i = left; i < 4; i++) o[i] = 0;
      e = vld1q_f32(o);
    }
    sum = vaddq_f64(sum, vaddq_f64(vcvt_f64_f32(vget_low_f32(e)), vcvt_high_f64_f32(e)));
    float o[4];
    vst1q_f32(o, e);
    for (int i = 0; i < 4 && i < left; i++) scores[p + i] = o[i];
  }
  return (float)(1.0 / vaddvq_f64(sum));
}

// One (token, head) item of a query row qo against K/V at k, v (kvo: the kv head's byte offset
// inside a position's row) over positions 0..len-1, into oo; scores: len floats of scratch.
static void att_one(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                    float *scores, float *oo) {
  const size_t es = half ? 2 : 4;
  const int nc = (hd + 3) / 4;
  float32x4_t qv[nc], o[nc];
  for (int c = 0; c < nc; c++) {
    float v4[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4 && 4 * c + i < hd; i++) v4[i] = half ? round_f16(qo[4 * c + i]) : qo[4 * c + i];
    qv[c] = vld1q_f32(v4);
  }
  for (int p = 0; p < len; p++) {
    const uint8_t *kp = m + k + (size_t)p * rowStride + kvo;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    for (int c = 0; c < nc; c += 2) {
      a0 = vfmaq_f32(a0, qv[c], load_kv4(kp + 4 * (size_t)c * es, half, hd - 4 * c));
      if (c + 1 < nc) a1 = vfmaq_f32(a1, qv[c + 1], load_kv4(kp + 4 * (size_t)(c + 1) * es, half, hd - 4 * (c + 1)));
    }
    scores[p] = hsum(vaddq_f32(a0, a1)) * scale;
  }
  const float inv = softmax_scores(scores, len);
  for (int c = 0; c < nc; c++) o[c] = vdupq_n_f32(0);
  for (int p = 0; p < len; p++) {
    float pv = scores[p] * inv;
    if (half) pv = round_f16(pv);
    const uint8_t *vp = m + v + (size_t)p * rowStride + kvo;
    for (int c = 0; c < nc; c++) o[c] = vfmaq_n_f32(o[c], load_kv4(vp + 4 * (size_t)c * es, half, hd - 4 * c), pv);
  }
  for (int c = 0; c < nc; c++) {
    float v4[4];
    vst1q_f32(v4, o[c]);
    for (int i = 0; i < 4 && 4 * c + i < hd; i++) oo[4 * c + i] = v4[i];
  }
}

// nh consecutive heads of one token that share the kv head at kvo (q at qo, out at oo, head j
// at + j * hd), one at a time; scores of head j would go at scores + j * hs, one is enough here.
static void att_heads(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                      float *scores, size_t hs, int nh, float *oo) {
  (void)hs;
  for (int j = 0; j < nh; j++) att_one(m, qo + (size_t)j * hd, k, v, kvo, rowStride, len, hd, scale, half, scores, oo + (size_t)j * hd);
}

#include "attention-jobs.h"

#include "norm-rope.h"

// out[i] = silu(g[i]) * u[i] for i in [i0, i1) (out may alias g).
static inline void swiglu_span(const float *G, const float *U, float *O, int i0, int i1) {
  for (int i = i0; i < i1; i += 4) {
    const int left = i1 - i;
    float g4[4] = {0, 0, 0, 0}, u4[4] = {0, 0, 0, 0};
    const int k = left < 4 ? left : 4;
    for (int j = 0; j < k; j++) {
      g4[j] = G[i + j];
      u4[j] = U[i + j];
    }
    const float32x4_t x = vld1q_f32(g4);
    const float32x4_t silu = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(x))));
    float o4[4];
    vst1q_f32(o4, vmulq_f32(silu, vld1q_f32(u4)));
    for (int j = 0; j < k; j++) O[i + j] = o4[j];
  }
}

#include "swiglu-jobs.h"
