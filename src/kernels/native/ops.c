// Element-wise and attention kernels (AVX-512, else AVX2): attention and SwiGLU here, RMSNorm and RoPE in norm-rope.h; twins
// of the wasm and TypeScript kernels (RMSNorm and RoPE bit-identical to the reference).
#include "common.h"

// ---- Attention and SwiGLU (AVX-512), twins of attention.ts / swiglu in the wasm kernels ----
#if defined(__AVX512BW__)
#include <math.h>

// e^x for 16 lanes: Cephes' expf polynomial on x - n ln2, scaled by 2^n (max error ~2 ulp,
// like ggml's own vector expf that llama.cpp's softmax and SiLU use); 0 far below, inf above.
static inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.72283935546875f)), _mm512_set1_ps(-103.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

static inline __m512 load_kv(const uint8_t *p, int half, __mmask16 mk) {
  if (half) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, p));
  return _mm512_maskz_loadu_ps(mk, p);
}

static inline __m512 load_kv16(const uint8_t *p, int half) {
  return half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_ps((const float *)p);
}

// Softmax of scores[0..len) in place (max, e^(s - max) summed in f64 as llama.cpp); returns 1 / sum.
static inline float softmax_scores(float *scores, int len) {
  __m512 vmx = _mm512_set1_ps(-INFINITY);
  for (int p = 0; p < len; p += 16) {
    const __mmask16 mk = len - p >= 16 ? 0xffff : (__mmask16)((1u << (len - p)) - 1);
    vmx = _mm512_mask_max_ps(vmx, mk, vmx, _mm512_maskz_loadu_ps(mk, scores + p));
  }
  vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
  __m512d sum2 = _mm512_setzero_pd();
  for (int p = 0; p < len; p += 16) {
    const __mmask16 mk = len - p >= 16 ? 0xffff : (__mmask16)((1u << (len - p)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scores + p), vmx)));
    _mm512_mask_storeu_ps(scores + p, mk, e);
    sum2 = _mm512_add_pd(sum2, _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(e)), _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)))));
  }
  return (float)(1.0 / _mm512_reduce_add_pd(sum2));
}

// One (token, head) item of a query row qo against K/V at k, v (kvo: the kv head's byte offset
// inside a position's row) over positions 0..len-1, into oo; scores: len floats of scratch.
// Any head size; att_heads takes 64 and 128 through att_group instead.
static void att_one(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                    float *scores, float *oo) {
  const size_t es = half ? 2 : 4;
  const int nc = (hd + 15) / 16;
  float qr[nc * 16];
  float oa[nc * 16];
  for (int i = 0; i < nc * 16; i++) qr[i] = i < hd ? (half ? round_f16(qo[i]) : qo[i]) : 0.0f;
  for (int p = 0; p < len; p++) {
    const uint8_t *kp = m + k + (size_t)p * rowStride + kvo;
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < nc; c++) {
      const __mmask16 mk = 16 * c + 16 <= hd ? 0xffff : (__mmask16)((1u << (hd - 16 * c)) - 1);
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 16 * c), load_kv(kp + 16 * (size_t)c * es, half, mk), acc);
    }
    scores[p] = _mm512_reduce_add_ps(acc) * scale;
  }
  const float inv = softmax_scores(scores, len);
  for (int i = 0; i < nc * 16; i++) oa[i] = 0;
  for (int p = 0; p < len; p++) {
    float pv = scores[p] * inv;
    if (half) pv = round_f16(pv);
    const __m512 pw = _mm512_set1_ps(pv);
    const uint8_t *vp = m + v + (size_t)p * rowStride + kvo;
    for (int c = 0; c < nc; c++) {
      const __mmask16 mk = 16 * c + 16 <= hd ? 0xffff : (__mmask16)((1u << (hd - 16 * c)) - 1);
      _mm512_storeu_ps(oa + 16 * c, _mm512_fmadd_ps(pw, load_kv(vp + 16 * (size_t)c * es, half, mk), _mm512_loadu_ps(oa + 16 * c)));
    }
  }
  for (int i = 0; i < hd; i++) oo[i] = oa[i];
}

// Sixteen horizontal sums at once: lane i of the result is _mm512_reduce_add_ps(a[s]) for the
// slot s = 4 * (i % 4) + i / 4, in that function's own tree (lanes j + 8, then j + 4, then
// j + 2, then j + 1; GCC's avx512fintrin.h), so each sum has its bits. Float addition is
// commutative, so which operand of a pair sits where does not matter; only the tree does.
static inline __m512 reduce16(const __m512 a[16]) {
  __m512 b[8], c[4], d[2];
  for (int i = 0; i < 8; i++)
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; i++)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; i++)
    d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// NH heads (q at qo + j * hd, out at oo + j * hd) that share one kv head, hd = 16 * NC, over
// positions 0..len-1; head j's scores at scores + j * hs. Each head's arithmetic is that of the
// head alone (the same products, chains and trees, so the same bits at any NH): q rounded to
// f16 when the cache is, a score = reduce(q0 k0, then fmadd over the chunks) * scale, a
// weight = f16(e * (1 / sum)), out = fmadd over the positions in order. What is shared is the memory work:
// a block of 16 K rows is converted to f32 once for all NH heads and its 16 dot products per
// head reduced together (reduce16), and each V row is converted once for PH heads at a time.
static inline __attribute__((always_inline)) void att_group(const float *qo, const uint8_t *kb, const uint8_t *vb, size_t rowStride, int len, float scale,
                                                            int half, float *scores, size_t hs, float *oo, const int NC, const int NH) {
  const size_t cs = half ? 32 : 64;
  const int PH = NH * NC <= 16 ? NH : 16 / NC;
  float kf[16 * 16 * 8] __attribute__((aligned(64)));
  for (int p0 = 0; p0 < len; p0 += 16) {
    const int nb = len - p0 < 16 ? len - p0 : 16;
    for (int i = 0; i < 16; i++)
      for (int c = 0; c < NC; c++)
        _mm512_store_ps(kf + (size_t)i * 16 * NC + 16 * c, i < nb ? load_kv16(kb + (size_t)(p0 + i) * rowStride + c * cs, half) : _mm512_setzero_ps());
    const __mmask16 mk = nb == 16 ? 0xffff : (__mmask16)((1u << nb) - 1);
    for (int j = 0; j < NH; j++) {
      __m512 qv[8];
      for (int c = 0; c < NC; c++) {
        qv[c] = _mm512_loadu_ps(qo + (size_t)j * 16 * NC + 16 * c);
        if (half) qv[c] = _mm512_cvtph_ps(_mm512_cvtps_ph(qv[c], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      __m512 a[16];
      for (int s = 0; s < 16; s++) {
        const float *kr = kf + (size_t)(4 * (s & 3) + (s >> 2)) * 16 * NC;
        a[s] = _mm512_mul_ps(qv[0], _mm512_load_ps(kr));
        for (int c = 1; c < NC; c++) a[s] = _mm512_fmadd_ps(qv[c], _mm512_load_ps(kr + 16 * c), a[s]);
      }
      _mm512_mask_storeu_ps(scores + j * hs + p0, mk, _mm512_mul_ps(reduce16(a), _mm512_set1_ps(scale)));
    }
  }
  // The weights scores * (1 / sum), rounded to f16 when the cache is, in place.
  for (int j = 0; j < NH; j++) {
    float *sj = scores + j * hs;
    const __m512 inv = _mm512_set1_ps(softmax_scores(sj, len));
    for (int p = 0; p < len; p += 16) {
      const __mmask16 mk = len - p >= 16 ? 0xffff : (__mmask16)((1u << (len - p)) - 1);
      __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, sj + p), inv);
      if (half) w = _mm512_cvtph_ps(_mm512_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      _mm512_mask_storeu_ps(sj + p, mk, w);
    }
  }
  for (int j0 = 0; j0 < NH; j0 += PH) {
    const int nh = NH - j0 < PH ? NH - j0 : PH;
    __m512 o[4][8];
    for (int j = 0; j < PH; j++)
      for (int c = 0; c < NC; c++) o[j][c] = _mm512_setzero_ps();
    for (int p = 0; p < len; p++) {
      const uint8_t *vp = vb + (size_t)p * rowStride;
      __m512 vv[8];
      for (int c = 0; c < NC; c++) vv[c] = load_kv16(vp + c * cs, half);
      for (int j = 0; j < PH; j++) {
        if (j >= nh) break;
        const __m512 pw = _mm512_set1_ps(scores[(j0 + j) * hs + p]);
        for (int c = 0; c < NC; c++) o[j][c] = _mm512_fmadd_ps(pw, vv[c], o[j][c]);
      }
    }
    for (int j = 0; j < nh; j++)
      for (int c = 0; c < NC; c++) _mm512_storeu_ps(oo + (size_t)(j0 + j) * 16 * NC + 16 * c, o[j][c]);
  }
}

// nh (1..ATT_HEADS) consecutive heads of one token that share the kv head at kvo: q at qo and
// out at oo, head j at + j * hd; head j's scores at scores + j * hs.
static void att_heads(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                      float *scores, size_t hs, int nh, float *oo) {
  if (hd == 64 || hd == 128) {
    const uint8_t *kb = m + k + kvo;
    const uint8_t *vb = m + v + kvo;
#define ATT_GROUP(NC)                                                                            \
  switch (nh) {                                                                                  \
    case 1: att_group(qo, kb, vb, rowStride, len, scale, half, scores, hs, oo, NC, 1); break;    \
    case 2: att_group(qo, kb, vb, rowStride, len, scale, half, scores, hs, oo, NC, 2); break;    \
    case 3: att_group(qo, kb, vb, rowStride, len, scale, half, scores, hs, oo, NC, 3); break;    \
    default: att_group(qo, kb, vb, rowStride, len, scale, half, scores, hs, oo, NC, 4); break;   \
  }
    if (hd == 64) {
      ATT_GROUP(4)
    } else {
      ATT_GROUP(8)
    }
#undef ATT_GROUP
    return;
  }
  for (int j = 0; j < nh; j++) att_one(m, qo + (size_t)j * hd, k, v, kvo, rowStride, len, hd, scale, half, scores, oo + (size_t)j * hd);
}

#include "attention-jobs.h"

// out[i] = silu(g[i]) * u[i] for i in [i0, i1) (out may alias g).
static inline void swiglu_span(const float *G, const float *U, float *O, int i0, int i1) {
  for (int i = i0; i < i1; i += 16) {
    const __mmask16 mk = i1 - i >= 16 ? 0xffff : (__mmask16)((1u << (i1 - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(mk, G + i);
    const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    _mm512_mask_storeu_ps(O + i, mk, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mk, U + i)));
  }
}

#include "swiglu-jobs.h"

// ---- The same kernels on AVX2 (8 lanes; F16C converts the f16 cache), as ops-neon.c does on 4 ----
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <math.h>

// e^x for 8 lanes: the polynomial of exp16, 2^n applied in two halves so that every factor is
// a normal float (n spans -149..128).
static inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.72283935546875f)), _mm256_set1_ps(-103.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 values of a K or V row (f16 when half), zero past `left` values.
static inline __m256 load_kv8(const uint8_t *p, int half, int left) {
  if (left >= 8) return half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < left; i++) v[i] = half ? f16(rd16(p + 2 * i)) : ((const float *)p)[i];
  return _mm256_loadu_ps(v);
}

// Softmax of scores[0..len) in place (max, e^(s - max) summed in f64 as llama.cpp); returns 1 / sum.
static inline float softmax_scores(float *scores, int len) {
  float mx = -INFINITY;
  for (int p = 0; p < len; p++) mx = scores[p] > mx ? scores[p] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256d sum = _mm256_setzero_pd();
  for (int p = 0; p < len; p += 8) {
    const int left = len - p;
    float v[8] = {mx, mx, mx, mx, mx, mx, mx, mx};
    for (int i = 0; i < 8 && i < left; i++) v[i] = scores[p + i];
    float o[8];
    _mm256_storeu_ps(o, exp8(_mm256_sub_ps(_mm256_loadu_ps(v), vmx)));
    for (int i = left; i < 8; i++) o[i] = 0;
    const __m256 e = _mm256_loadu_ps(o);
    sum = _mm256_add_pd(sum, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e)), _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1))));
    for (int i = 0; i < 8 && i < left; i++) scores[p + i] = o[i];
  }
  __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd(sum, 1));
  s2 = _mm_add_sd(s2, _mm_unpackhi_pd(s2, s2));
  return (float)(1.0 / _mm_cvtsd_f64(s2));
}

// One (token, head) item of a query row qo against K/V at k, v (kvo: the kv head's byte offset
// inside a position's row) over positions 0..len-1, into oo; scores: len floats of scratch.
static void att_one(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                    float *scores, float *oo) {
  const size_t es = half ? 2 : 4;
  const int nc = (hd + 7) / 8;
  __m256 qv[nc], o[nc];
  for (int c = 0; c < nc; c++) {
    float v8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8 && 8 * c + i < hd; i++) v8[i] = half ? round_f16(qo[8 * c + i]) : qo[8 * c + i];
    qv[c] = _mm256_loadu_ps(v8);
  }
  for (int p = 0; p < len; p++) {
    const uint8_t *kp = m + k + (size_t)p * rowStride + kvo;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int c = 0; c < nc; c += 2) {
      a0 = _mm256_fmadd_ps(qv[c], load_kv8(kp + 8 * (size_t)c * es, half, hd - 8 * c), a0);
      if (c + 1 < nc) a1 = _mm256_fmadd_ps(qv[c + 1], load_kv8(kp + 8 * (size_t)(c + 1) * es, half, hd - 8 * (c + 1)), a1);
    }
    scores[p] = hsum8(_mm256_add_ps(a0, a1)) * scale;
  }
  const float inv = softmax_scores(scores, len);
  for (int c = 0; c < nc; c++) o[c] = _mm256_setzero_ps();
  for (int p = 0; p < len; p++) {
    float pv = scores[p] * inv;
    if (half) pv = round_f16(pv);
    const __m256 pb = _mm256_set1_ps(pv);
    const uint8_t *vp = m + v + (size_t)p * rowStride + kvo;
    for (int c = 0; c < nc; c++) o[c] = _mm256_fmadd_ps(load_kv8(vp + 8 * (size_t)c * es, half, hd - 8 * c), pb, o[c]);
  }
  for (int c = 0; c < nc; c++) {
    float v8[8];
    _mm256_storeu_ps(v8, o[c]);
    for (int i = 0; i < 8 && 8 * c + i < hd; i++) oo[8 * c + i] = v8[i];
  }
}

// nh consecutive heads of one token that share the kv head at kvo, one at a time (head j's
// q at qo + j * hd, out at oo + j * hd); one head's scores at a time need no more scratch.
static void att_heads(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo, size_t rowStride, int len, int hd, float scale, int half,
                      float *scores, size_t hs, int nh, float *oo) {
  (void)hs;
  for (int j = 0; j < nh; j++) att_one(m, qo + (size_t)j * hd, k, v, kvo, rowStride, len, hd, scale, half, scores, oo + (size_t)j * hd);
}

#include "attention-jobs.h"

// out[i] = silu(g[i]) * u[i] for i in [i0, i1) (out may alias g).
static inline void swiglu_span(const float *G, const float *U, float *O, int i0, int i1) {
  int i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 x = _mm256_loadu_ps(G + i);
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(O + i, _mm256_mul_ps(silu, _mm256_loadu_ps(U + i)));
  }
  if (i < i1) {
    float g8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, u8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, o8[8];
    for (int j = 0; i + j < i1; j++) {
      g8[j] = G[i + j];
      u8[j] = U[i + j];
    }
    const __m256 x = _mm256_loadu_ps(g8);
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(o8, _mm256_mul_ps(silu, _mm256_loadu_ps(u8)));
    for (int j = 0; i + j < i1; j++) O[i + j] = o8[j];
  }
}

#include "swiglu-jobs.h"
#endif

// Whether this build has the kernels above and RMSNorm and RoPE (native-lib's opsPrototypes).
#if defined(__AVX512BW__) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#include "norm-rope.h"
int tk_ops(void) { return 1; }
#else
int tk_ops(void) { return 0; }
#endif
