// arm64 (NEON) twin of gemm-vnni.c and q4-vnni.c: Q8_0 / Q4_0 with the activations quantised
// once per matmul (decode: tk_q8_prep + tk_mm_q8v / tk_mm_q4v; prefill: tk_q8t_prep +
// tk_mm_q8t / tk_mm_q4t; both in one pass: tk_mm_q8tv) and the K-quant prefill GEMM
// (tk_kt_prep + tk_mm_kt). Same symbols, arguments and layouts as the x86 files (see there);
// the dot products come from neon.h (SDOT, USDOT or plain NEON, chosen at build time).
#include "neon.h"

// The prepared-activation kernels exist in this build (the loader asks by the x86 name).
int tk_vnni512(void) { return 1; }

// x [n, cols] f32 -> xu [n, cp] u8 (q + 128; cp = nbp * 32, nbp = nb rounded up to even,
// padding q = 0) and dx [n, nbp] f32, as quant_q8_0 and llama.cpp: d = f16(amax / 127),
// q = nearest-even(x * 127 / amax), saturated to i8.
static inline void quant_block(const float *x, float *d, uint8_t *q) {
  float32x4_t v[8];
  float32x4_t mx = vdupq_n_f32(0);
  for (int i = 0; i < 8; i++) {
    v[i] = vld1q_f32(x + 4 * i);
    mx = vmaxq_f32(mx, vabsq_f32(v[i]));
  }
  const float amax = vmaxvq_f32(mx);
  *d = round_f16(amax / 127.0f);
  const float32x4_t id = vdupq_n_f32(amax != 0 ? 127.0f / amax : 0.0f);
  for (int i = 0; i < 8; i += 4) {
    int16x8_t a = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i], id))), vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 1], id))));
    int16x8_t b = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 2], id))), vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 3], id))));
    const int8x16_t s = vcombine_s8(vqmovn_s16(a), vqmovn_s16(b));
    vst1q_u8(q + 4 * i, veorq_u8(vreinterpretq_u8_s8(s), vdupq_n_u8(0x80)));
  }
}

void tk_q8_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xu, uint32_t dx, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t cp = (size_t)nbp * 32;
  for (int t = part(n, tid, nt); t < part(n, tid + 1, nt); t++) {
    const float *xt = (const float *)(m + x) + (size_t)t * cols;
    uint8_t *q = m + xu + (size_t)t * cp;
    float *d = (float *)(m + dx) + (size_t)t * nbp;
    for (int b = 0; b < nb; b++) quant_block(xt + 32 * (size_t)b, d + b, q + 32 * (size_t)b);
    for (int b = nb; b < nbp; b++) {
      d[b] = 0;
      for (int i = 0; i < 32; i++) q[32 * (size_t)b + i] = 0x80;
    }
  }
}

// One 4-row tile times T (1..8) tokens: each row streamed once for all T; per block and token
// one i32x4 of products, scaled by s_row * d_x into one of two accumulators (alternating by
// block), the same arithmetic for a token whatever T is. q4: the rows are Q4_0 (16 bytes a block).
static inline __attribute__((always_inline)) void tile_v(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, size_t xstride,
                                                         const float *dx, int dxstride, float *y, int ystride, const int T, const int q4) {
  for (int r = 0; r < 4; r++) {
    const uint8_t *wr = w + r * rowBytes;
    float32x4_t acc[2][8];
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = vdupq_n_f32(0);
    for (int b = 0; b < nb; b++) {
      int8x16_t w0, w1;
      if (q4) {
        PREFETCH_R(wr + 16 * (size_t)b + PREFETCH);
        q4_block(wr + 16 * (size_t)b, &w0, &w1);
      } else {
        PREFETCH_R(wr + 32 * (size_t)b + PREFETCH);
        w0 = vld1q_s8((const int8_t *)(wr + 32 * (size_t)b));
        w1 = vld1q_s8((const int8_t *)(wr + 32 * (size_t)b + 16));
      }
      const float sr = s[4 * b + r];
      for (int t = 0; t < T; t++) {
        const uint8_t *xb = xu + t * xstride + 32 * (size_t)b;
        const int32x4_t p = dot_s8(dot_s8(vdupq_n_s32(0), w0, unbias(vld1q_u8(xb))), w1, unbias(vld1q_u8(xb + 16)));
        acc[b & 1][t] = vfmaq_n_f32(acc[b & 1][t], vcvtq_f32_s32(p), sr * dx[(size_t)t * dxstride + b]);
      }
    }
    for (int t = 0; t < T; t++) y[t * ystride + r] = hsum(vaddq_f32(acc[0][t], acc[1][t]));
  }
}

// Tokens [0, n) of one tile, 8 at a time (the switch gives each T its own unrolled copy).
static void tile_v_all(const uint8_t *w, size_t rowBytes, const float *s, int nb, const uint8_t *xu, size_t cp, const float *dx, int nbp, float *y,
                       int ystride, int n, int q4) {
  for (int t = 0; t < n; t += 8) {
    const uint8_t *xt = xu + (size_t)t * cp;
    const float *dt = dx + (size_t)t * nbp;
    float *yt = y + (size_t)t * ystride;
#define TV(T) q4 ? tile_v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, T, 1) : tile_v(w, rowBytes, s, nb, xt, cp, dt, nbp, yt, ystride, T, 0)
    switch (n - t < 8 ? n - t : 8) {
      case 1: TV(1); break;
      case 2: TV(2); break;
      case 3: TV(3); break;
      case 4: TV(4); break;
      case 5: TV(5); break;
      case 6: TV(6); break;
      case 7: TV(7); break;
      default: TV(8); break;
    }
#undef TV
  }
}

static void mm_v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt,
                 int q4) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  const size_t rowBytes = q4 ? (size_t)cols / 2 : (size_t)cols;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++)
    tile_v_all(m + wq + (size_t)tl * 4 * rowBytes, rowBytes, (const float *)(m + ws) + (size_t)tl * nb * 4, nb, m + xu, (size_t)nbp * 32,
               (const float *)(m + dx), nbp, (float *)(m + y) + 4 * (size_t)tl, ystride, n, q4);
}

void tk_mm_q8v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  mm_v(base, wq, ws, cols, xu, dx, n, y, ystride, tiles, tid, nt, 0);
}

void tk_mm_q4v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  mm_v(base, wq, ws, cols, xu, dx, n, y, ystride, tiles, tid, nt, 1);
}

// ---- Prefill GEMM, tokens across the lanes (gemm-vnni.c's layout) ---------------------------
// xt [G][cols/4][16] u32: per group of 15 tokens, 4 consecutive (q + 128) quants of each
// token in lanes 0-14 and of a zero token in lane 15; dxt [G][nb][16] f32 (0 for zero tokens).
void tk_q8t_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xt, uint32_t dxt, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int groups = (n + 14) / 15;
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
        uint32_t q[8];
        quant_block(xr + 32 * (size_t)b, D + 16 * b + lane, (uint8_t *)q);
        for (int j = 0; j < 8; j++) X[16 * (size_t)(8 * b + j) + lane] = q[j];
      }
    }
  }
}

// One Q8 row (wr: i8, cols bytes; s: its scale per block, stride 4) times one group of 15
// tokens into y[t * ystride]. Per block and 4-token quad: 8 lane dots, the zero lane taken off.
static void gemm_row(const int8_t *wr, const float *s, int nb, const uint8_t *X, const float *D, float *y, int ystride, int tokens) {
  float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
  for (int b = 0; b < nb; b++) {
    const int8x16_t w0 = vld1q_s8(wr + 32 * (size_t)b);
    const int8x16_t w1 = vld1q_s8(wr + 32 * (size_t)b + 16);
    const uint8_t *xb = X + 64 * (size_t)(8 * b);
    int32x4_t p[4];
    for (int q = 0; q < 4; q++) p[q] = dot4k(dot4k(vdupq_n_s32(0), xb, q, w0), xb + 256, q, w1);
    const int32x4_t zero = vdupq_laneq_s32(p[3], 3);
    const float sr = s[4 * (size_t)b];
    for (int q = 0; q < 4; q++)
      acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(vsubq_s32(p[q], zero)), vmulq_n_f32(vld1q_f32(D + 16 * (size_t)b + 4 * q), sr));
  }
  float o[16];
  for (int q = 0; q < 4; q++) vst1q_f32(o + 4 * q, acc[q]);
  for (int t = 0; t < tokens; t++) y[(size_t)t * ystride] = o[t];
}

// Rows [4 * tile0, 4 * tile1) (i8 rows in w, rowBytes apart; scales per 4-row tile) times all
// token groups; each row is read once per group of 15 tokens, from cache after the first.
static void gemm_tiles(const uint8_t *w, size_t rowBytes, const float *ws, int nb, int cols, const uint8_t *xt, const float *dxt, int n, float *y,
                       int ystride, int tile0, int tile1) {
  const int groups = (n + 14) / 15;
  for (int g = 0; g < groups; g++) {
    const int tokens = n - 15 * g < 15 ? n - 15 * g : 15;
    for (int r = 4 * tile0; r < 4 * tile1; r++)
      gemm_row((const int8_t *)(w + (size_t)(r - 4 * tile0) * rowBytes), ws + (size_t)(r >> 2) * nb * 4 + (r & 3), nb, xt + (size_t)g * cols * 16,
               dxt + (size_t)g * nb * 16, y + (size_t)g * 15 * ystride + r, ystride, tokens);
  }
}

void tk_mm_q8t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int t0 = part(tiles, tid, nt), t1 = part(tiles, tid + 1, nt);
  gemm_tiles(m + wq + (size_t)t0 * 4 * cols, (size_t)cols, (const float *)(m + ws), cols / 32, cols, m + xt, (const float *)(m + dxt), n,
             (float *)(m + y), ystride, t0, t1);
}

// Q4_0 rows [4 * t0, 4 * t1) decoded to i8 (nibble - 8, element order) into buf [rows, cols].
static void decode_q4(const uint8_t *w, int cols, int rows, int8_t *buf) {
  const size_t rowBytes = (size_t)cols / 2;
  for (int r = 0; r < rows; r++)
    for (int b = 0; b < cols / 32; b++) {
      int8x16_t lo, hi;
      q4_block(w + r * rowBytes + 16 * (size_t)b, &lo, &hi);
      vst1q_s8(buf + (size_t)r * cols + 32 * (size_t)b, lo);
      vst1q_s8(buf + (size_t)r * cols + 32 * (size_t)b + 16, hi);
    }
}

// Q4_0 prefill GEMM: each 4-row tile decoded once to i8, then multiplied as Q8_0 rows.
void tk_mm_q4t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t y, int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  int8_t *buf = (int8_t *)malloc((size_t)4 * cols);
  if (!buf) return;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++) {
    decode_q4(m + wq + (size_t)tl * 4 * (cols / 2), cols, 4, buf);
    gemm_tiles((const uint8_t *)buf, (size_t)cols, (const float *)(m + ws), cols / 32, cols, m + xt, (const float *)(m + dxt), n, (float *)(m + y),
               ystride, tl, tl + 1);
  }
  free(buf);
}

// The prefill GEMM of n tokens and d more one-token rows in one pass over each tile (as
// gemm-vnni.c's tk_mm_q8tv): rows 0..n-1 as tk_mm_q8t, rows n.. as tk_mm_q8v on them alone.
void tk_mm_q8tv(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t xu, uint32_t dx, int d, uint32_t y,
                int ystride, int tiles, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int nb = cols / 32;
  const int nbp = (nb + 1) & ~1;
  for (int tl = part(tiles, tid, nt); tl < part(tiles, tid + 1, nt); tl++) {
    const uint8_t *w = m + wq + (size_t)tl * 4 * cols;
    gemm_tiles(w, (size_t)cols, (const float *)(m + ws), nb, cols, m + xt, (const float *)(m + dxt), n, (float *)(m + y), ystride, tl, tl + 1);
    tile_v_all(w, (size_t)cols, (const float *)(m + ws) + (size_t)tl * nb * 4, nb, m + xu, (size_t)nbp * 32, (const float *)(m + dx), nbp,
               (float *)(m + y) + (size_t)n * ystride + 4 * (size_t)tl, ystride, d, 0);
  }
}
