// arm64 (NEON) twin of kernels.c: the library's identity (tk_addr, tk_isa), Q8_0 / Q4_0 times
// the i16 activations of quant_q8_0 (tk_mm_q8_0, tk_mm_q4_0) and F32 / F16 / BF16 weights
// (tk_mm_float). Same symbols, arguments and layouts as the x86 file (see there): quants
// [rowsPad, rowBytes], scales [rowsPad/4, nb, 4] f32, x16 [n, cols] i16, xd [n, nb] f32,
// y [n, ystride] f32; the Q8_0 / Q4_0 matmuls' threads take tiles as they get to them (claims_take),
// tk_mm_float's thread tid computes tiles [part(tiles, tid), part(tiles, tid + 1)).
#include "neon.h"

uintptr_t tk_addr(uint8_t *p) { return (uintptr_t)p; }

// The loader (native-lib.ts) reads the family from the prefix: "neon" builds carry every kernel.
const char *tk_isa(void) {
#if defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
  return "neon-i8mm";
#elif defined(__ARM_FEATURE_DOTPROD)
  return "neon-dotprod";
#else
  return "neon";
#endif
}

#define MAXT 4

// One 4-row tile times nt_ (1..MAXT) tokens; each token's arithmetic is the same whatever
// nt_ is (a token's bits do not depend on its batch). Per block: the token's 32 i16 values
// narrowed once to i8 (|q| <= 127), one i32x4 of products per row, scaled by s_row * d_x.
static inline void tile(const uint8_t *w, size_t rowBytes, const float *s, int nb, const int16_t *x, size_t xstride,
                        const float *xd, int xdstride, float *y, int ystride, int nt_, int q4) {
  float32x4_t acc[4][MAXT];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < MAXT; t++) acc[r][t] = vdupq_n_f32(0);
  for (int b = 0; b < nb; b++) {
    int8x16_t x0[MAXT], x1[MAXT];
    for (int t = 0; t < nt_; t++) {
      const int16_t *xb = x + t * xstride + 32 * (size_t)b;
      x0[t] = vcombine_s8(vmovn_s16(vld1q_s16(xb)), vmovn_s16(vld1q_s16(xb + 8)));
      x1[t] = vcombine_s8(vmovn_s16(vld1q_s16(xb + 16)), vmovn_s16(vld1q_s16(xb + 24)));
    }
    for (int r = 0; r < 4; r++) {
      int8x16_t w0, w1;
      if (q4) {
        q4_block(w + r * rowBytes + 16 * (size_t)b, &w0, &w1);
      } else {
        w0 = vld1q_s8((const int8_t *)(w + r * rowBytes + 32 * (size_t)b));
        w1 = vld1q_s8((const int8_t *)(w + r * rowBytes + 32 * (size_t)b + 16));
      }
      const float sr = s[4 * b + r];
      for (int t = 0; t < nt_; t++) {
        const int32x4_t p = dot_s8(dot_s8(vdupq_n_s32(0), w0, x0[t]), w1, x1[t]);
        acc[r][t] = vfmaq_n_f32(acc[r][t], vcvtq_f32_s32(p), sr * xd[t * xdstride + b]);
      }
    }
  }
  for (int t = 0; t < nt_; t++)
    for (int r = 0; r < 4; r++) y[t * ystride + r] = hsum(acc[r][t]);
}

static void mm(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, int n, uint32_t y,
               int ystride, int tiles, int tid, int nt, int q4) {
  (void)tid;
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const size_t rowBytes = q4 ? (size_t)cols / 2 : (size_t)cols;
  tk_claims claims = claims_open(base, tiles, nt);
  int t0, t1;
  while (claims_take(&claims, &t0, &t1))
    for (int tl = t0; tl < t1; tl++) {
      const uint8_t *w = m + wq + (size_t)tl * 4 * rowBytes;
      const float *s = (const float *)(m + ws) + (size_t)tl * nb * 4;
      for (int t = 0; t < n; t += MAXT) {
        const int k = n - t < MAXT ? n - t : MAXT;
        tile(w, rowBytes, s, nb, (const int16_t *)(m + x16) + (size_t)t * cols, (size_t)cols,
             (const float *)(m + xd) + (size_t)t * nb, nb, (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl, ystride, k, q4);
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

// ---- F32 / F16 / BF16 weights times f32 activations (already rounded to the dot type) -------
// type: 0 F32, 1 F16, 30 BF16; rows [rowsPad, cols] raw; one 4-row tile times each token.
static inline float32x4_t load_w4(int type, const uint8_t *p) {
  if (type == 0) return vld1q_f32((const float *)p);
  const uint16x4_t h = vld1_u16((const uint16_t *)p);
  if (type == 1) return vcvt_f32_f16(vreinterpret_f16_u16(h));
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
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
  const int c4 = cols & ~3;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++) {
    const uint8_t *w0 = m + w + (size_t)tl * 4 * rowBytes;
    for (int t = 0; t < n; t++) {
      const float *xt = (const float *)(m + x) + (size_t)t * cols;
      float32x4_t a[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
      for (int c = 0; c < c4; c += 4) {
        const float32x4_t xv = vld1q_f32(xt + c);
        const uint8_t *wc = w0 + (size_t)c * es;
        for (int k = 0; k < 4; k++) a[k] = vfmaq_f32(a[k], load_w4(type, wc + k * rowBytes), xv);
      }
      float r[4];
      for (int k = 0; k < 4; k++) r[k] = hsum(a[k]);
      for (int c = c4; c < cols; c++)
        for (int k = 0; k < 4; k++) r[k] += load_w1(type, w0 + k * rowBytes + (size_t)c * es) * xt[c];
      float *yt = (float *)(m + y) + (size_t)t * ystride + 4 * (size_t)tl;
      for (int k = 0; k < 4; k++) yt[k] = r[k];
    }
  }
}
