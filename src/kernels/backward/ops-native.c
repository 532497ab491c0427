// Native twins of the training step's element-wise and attention ops (train-ops.ts holds the
// TypeScript ones, the truth for tests), compiled into the same library as gemm-native.c and
// called through koffi on the caller's Float32Arrays in place. Shapes and semantics are the
// TypeScript functions' (rms-norm.ts, swiglu.ts, cross-entropy.ts, rope.ts, attention.ts,
// adamw.ts); the sums differ from theirs only in f32 rounding and order.
//
// Determinism: every output is computed by one thread in a fixed order, and reductions over
// rows (a row's loss, RMSNorm's weight gradient) are summed serially in row order, so no
// result depends on `threads`. Loops marked `omp simd` vectorise (their reductions reassociate
// across lanes, always the same way); exp is a polynomial (exp_f) so that they can.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

// Work below this many elements stays on the calling thread (waking threads costs more).
#define SMALL_OP (1L << 16)

// Runs CALL (which reads lo, hi) over [0, n) cut into one contiguous range per thread.
#define SPLIT(n, threads, CALL)                                                                     \
  do {                                                                                              \
    if ((threads) > 1 && (n) >= SMALL_OP) {                                                         \
      _Pragma("omp parallel num_threads(threads)") {                                                \
        const long nt_ = omp_get_num_threads(), id_ = omp_get_thread_num();                         \
        const long lo = (n) * id_ / nt_, hi = (n) * (id_ + 1) / nt_;                                  \
        CALL;                                                                                       \
      }                                                                                             \
    } else {                                                                                        \
      const long lo = 0, hi = (n);                                                                  \
      CALL;                                                                                         \
    }                                                                                               \
  } while (0)

// exp(x) within 2 ulp for x in [-87.3, 88], 0 below, exp(88) above: 2^n exp(r) with
// n = round(x / ln 2), |r| <= ln 2 / 2 and Cephes' expf polynomial for exp(r). Branch-free,
// so that loops calling it vectorise.
static inline float exp_f(float x) {
  const float lo = -87.3f;
  const float c = x > 88.0f ? 88.0f : (x < lo ? lo : x);
  // 1.5 * 2^23 added: the sum's low mantissa bits hold round(c / ln 2) + 2^22
  const float t = c * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int bits;
  memcpy(&bits, &t, sizeof bits);
  const int e = (bits - 0x4B400000 + 127) << 23;
  float scale;
  memcpy(&scale, &e, sizeof scale);
  return x < lo ? 0.0f : p * scale;
}

static void swiglu_fwd(const float *g, const float *u, float *h, long lo, long hi) {
#pragma omp simd
  for (long i = lo; i < hi; i++) h[i] = g[i] / (1.0f + exp_f(-g[i])) * u[i];
}

// h = silu(g) * u over n elements.
void to_swiglu_fwd(const float *g, const float *u, float *h, long n, int threads) {
  SPLIT(n, threads, swiglu_fwd(g, u, h, lo, hi));
}

static void swiglu_bwd(const float *g, const float *u, const float *dh, float *dg, float *du, long lo,
                       long hi) {
#pragma omp simd
  for (long i = lo; i < hi; i++) {
    const float s = 1.0f / (1.0f + exp_f(-g[i]));
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
  }
}

// dg = dh u silu'(g), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g); du = dh silu(g).
void to_swiglu_bwd(const float *g, const float *u, const float *dh, float *dg, float *du, long n,
                   int threads) {
  SPLIT(n, threads, swiglu_bwd(g, u, dh, dg, du, lo, hi));
}

// y = x r w per row of dim, r = 1 / sqrt(mean(x^2) + eps) saved per row.
void to_rmsnorm_fwd(const float *x, const float *w, double eps, float *y, float *r, int n, int dim,
                    int threads) {
#pragma omp parallel for num_threads(threads) if (threads > 1 && (long)n * dim >= SMALL_OP) schedule(static)
  for (int t = 0; t < n; t++) {
    const float *xr = x + (long)t * dim;
    float *yr = y + (long)t * dim;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
    const float rt = (float)(1.0 / sqrt(ss / dim + eps));
    r[t] = rt;
#pragma omp simd
    for (int i = 0; i < dim; i++) yr[i] = xr[i] * rt * w[i];
  }
}

// dx = r dy w - x r^3 / dim sum(dy w x) (overwritten); dw += sum over rows of dy x r, rows in order.
void to_rmsnorm_bwd(const float *x, const float *w, const float *r, const float *dy, float *dx, float *dw,
                    int n, int dim) {
  for (int t = 0; t < n; t++) {
    const float *xr = x + (long)t * dim;
    const float *dyr = dy + (long)t * dim;
    float *dxr = dx + (long)t * dim;
    const float rt = r[t];
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < dim; i++) dot += (double)(dyr[i] * w[i]) * xr[i];
#pragma omp simd
    for (int i = 0; i < dim; i++) dw[i] += dyr[i] * xr[i] * rt;
    const float k = (float)((double)rt * rt * rt * dot / dim);
#pragma omp simd
    for (int i = 0; i < dim; i++) dxr[i] = rt * dyr[i] * w[i] - xr[i] * k;
  }
}

// One row of cross-entropy: the row's loss (log-sum-exp minus the target's logit); the row is
// overwritten by (softmax - onehot(target)) / denominator. NaN for a target outside the vocabulary.
static double ce_row(float *z, int target, int vocab, double denominator) {
  float max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int j = 0; j < vocab; j++) max = z[j] > max ? z[j] : max;
  if (target < 0 || target >= vocab) return NAN;
  const float picked = z[target];
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < vocab; j++) {
    const float e = exp_f(z[j] - max);
    z[j] = e;
    sum += e;
  }
  const float scale = (float)(1.0 / ((double)sum * denominator));
#pragma omp simd
  for (int j = 0; j < vocab; j++) z[j] *= scale;
  z[target] -= (float)(1.0 / denominator);
  return log((double)sum) + max - picked;
}

// Cross-entropy of n rows of logits [n, vocab] against targets [n], gradient in place; returns
// the summed loss over denominator (rows summed in order).
double to_cross_entropy(float *logits, const int *targets, int n, int vocab, double denominator,
                        int threads) {
  double *loss = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!loss) return NAN;
#pragma omp parallel for num_threads(threads) if (threads > 1 && (long)n * vocab >= SMALL_OP) schedule(static)
  for (int t = 0; t < n; t++) loss[t] = ce_row(logits + (long)t * vocab, targets[t], vocab, denominator);
  double total = 0;
  for (int t = 0; t < n; t++) total += loss[t];
  free(loss);
  return total / denominator;
}

// Rotates pairs (2i, 2i + 1) of x [rows, seq, heads, d] by position t's angles; sign -1 rotates back.
void to_rope(float *x, const float *cos_t, const float *sin_t, int rows, int seq, int heads, int d,
             int sign) {
  const int half = d / 2;
  for (int b = 0; b < rows; b++)
    for (int t = 0; t < seq; t++) {
      const float *c = cos_t + (long)t * half;
      const float *sn = sin_t + (long)t * half;
      for (int h = 0; h < heads; h++) {
        float *o = x + (((long)b * seq + t) * heads + h) * d;
#pragma omp simd
        for (int i = 0; i < half; i++) {
          const float s = sign * sn[i];
          const float x0 = o[2 * i];
          const float x1 = o[2 * i + 1];
          o[2 * i] = x0 * c[i] - x1 * s;
          o[2 * i + 1] = x0 * s + x1 * c[i];
        }
      }
    }
}

// a += b over n elements.
void to_add(float *a, const float *b, long n) {
#pragma omp simd
  for (long i = 0; i < n; i++) a[i] += b[i];
}

// Sum of squares, in f64, in one fixed order.
double to_sum_squares(const float *x, long n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (long i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

void to_scale(float *x, long n, float f) {
#pragma omp simd
  for (long i = 0; i < n; i++) x[i] *= f;
}

// fingerprint.ts's fingerprint, bit for bit: 16 lanes of MurmurHash3's block step, element i
// feeding lane i mod 16, each lane finalised with n. One pass over memory; the 16 lanes are
// independent, so the loop over a block of them vectorises.
#define FP_LANES 16

static inline unsigned rotl32(unsigned x, int r) { return (x << r) | (x >> (32 - r)); }

void to_fingerprint(const float *x, long n, unsigned *out) {
  const unsigned *u = (const unsigned *)x;
  unsigned h[FP_LANES];
  for (int j = 0; j < FP_LANES; j++) h[j] = 0x9747b28cu + (unsigned)j;
  long i = 0;
  for (; i + FP_LANES <= n; i += FP_LANES) {
#pragma omp simd
    for (int j = 0; j < FP_LANES; j++) {
      const unsigned k = rotl32(u[i + j] * 0xcc9e2d51u, 15) * 0x1b873593u;
      h[j] = rotl32(h[j] ^ k, 13) * 5u + 0xe6546b64u;
    }
  }
  for (; i < n; i++) {
    const unsigned k = rotl32(u[i] * 0xcc9e2d51u, 15) * 0x1b873593u;
    const int j = (int)(i & (FP_LANES - 1));
    h[j] = rotl32(h[j] ^ k, 13) * 5u + 0xe6546b64u;
  }
  for (int j = 0; j < FP_LANES; j++) {
    unsigned f = h[j] ^ (unsigned)n;
    f ^= f >> 16;
    f *= 0x85ebca6bu;
    f ^= f >> 13;
    f *= 0xc2b2ae35u;
    out[j] = f ^ (f >> 16);
  }
}

static void adamw(float *w, const float *g, float *m, float *v, const unsigned char *mask, long lo, long hi,
                  const double *k) {
  const double beta1 = k[1], beta2 = k[2], eps = k[3], decay = k[6];
  // one division and one square root an element: lr / c1 and 1 / c2 hoisted
  const double step = k[0] / k[4], inv_c2 = 1.0 / k[5];
#pragma omp simd
  for (long i = lo; i < hi; i++) {
    const double gi = g[i];
    const double mi = beta1 * m[i] + (1 - beta1) * gi;
    const double vi = beta2 * v[i] + (1 - beta2) * gi * gi;
    m[i] = (float)mi;
    v[i] = (float)vi;
    // times 1 where not decayed: exact, and keeps the loop branch-free
    const double p = (double)w[i] * (mask[i] ? decay : 1.0);
    w[i] = (float)(p - step * mi / (sqrt(vi * inv_c2) + eps));
  }
}

// AdamW as adamw.ts computes it, in f64 per element: moments, decoupled decay where mask[i],
// then w -= lr m_hat / (sqrt(v_hat) + eps), with c1, c2 the bias corrections 1 - beta^step
// (the same formula up to the rounding of the hoisted factors).
void to_adamw(float *w, const float *g, float *m, float *v, const unsigned char *mask, long n, double lr,
              double beta1, double beta2, double eps, double c1, double c2, double decay, int threads) {
  const double k[7] = {lr, beta1, beta2, eps, c1, c2, decay};
  SPLIT(n, threads, adamw(w, g, m, v, mask, lo, hi, k));
}

// Causal grouped-query attention (attention.ts's shapes): q, out [rows, seq, heads, d];
// k, v [rows, seq, kvHeads, d]; probs [rows, heads, seq, seq], row t filled for j <= t and 0
// above. One task is a (row, kv head): its heads share the gathered k and v, and it alone
// writes their outputs (and, backward, the kv head's gradients), so tasks run on any thread.
//
// The products run on blocks of 16 floats: a score row over key blocks (keys transposed and
// zero-padded to SP, a multiple of 16, columns), and sums of rows over the head dimension.
// Past position t a row's probabilities and score gradients are 0, so the padded lanes add
// nothing.
typedef float vf __attribute__((vector_size(64)));
#define W 16

static inline vf vld(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }

typedef struct {
  int rows, seq, heads, kv_heads, d;
} attn_shape;

static inline long at(const attn_shape *s, int b, int t, int h, int nh) {
  return (((long)b * s->seq + t) * nh + h) * s->d;
}

// out[jb * 16 ..] = sum over i < d of x[i] * mT[i * sp + jb * 16 ..] for the nb blocks.
static void row_times_t(const float *x, const float *mT, float *out, int nb, int d, long sp) {
  int jb = 0;
  for (; jb + 4 <= nb; jb += 4) {
    vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int i = 0; i < d; i++) {
      const float *r = mT + i * sp + jb * W;
      const float xi = x[i];
      a0 += xi * vld(r);
      a1 += xi * vld(r + W);
      a2 += xi * vld(r + 2 * W);
      a3 += xi * vld(r + 3 * W);
    }
    vst(out + jb * W, a0);
    vst(out + (jb + 1) * W, a1);
    vst(out + (jb + 2) * W, a2);
    vst(out + (jb + 3) * W, a3);
  }
  for (; jb < nb; jb++) {
    vf a0 = {0};
    for (int i = 0; i < d; i++) a0 += x[i] * vld(mT + i * sp + jb * W);
    vst(out + jb * W, a0);
  }
}

// out[0..d) = (add ? out : 0) + sum over r in [r0, r1) of c[r * cs] * m[r * ms .. + d).
static void sum_rows(float *out, const float *c, long cs, const float *m, long ms, int r0, int r1, int d,
                     int add) {
  if (d % W != 0) {
    if (!add) memset(out, 0, sizeof(float) * (size_t)d);
    for (int r = r0; r < r1; r++) {
      const float cr = c[r * cs];
      const float *mr = m + r * ms;
#pragma omp simd
      for (int i = 0; i < d; i++) out[i] += cr * mr[i];
    }
    return;
  }
  for (int ib = 0; ib < d; ib += W) {
    vf a0 = {0}, a1 = {0};
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
      a0 += c[r * cs] * vld(m + r * ms + ib);
      a1 += c[(r + 1) * cs] * vld(m + (r + 1) * ms + ib);
    }
    if (r < r1) a0 += c[r * cs] * vld(m + r * ms + ib);
    const vf sum = a0 + a1;
    vst(out + ib, add ? vld(out + ib) + sum : sum);
  }
}

// p[0..t] = softmax(scale * p[0..t]); p[t + 1 .. sp) = 0.
static void causal_softmax(float *p, int t, int sp, float scale) {
  float max = -INFINITY;
  for (int j = 0; j <= t; j++) max = p[j] * scale > max ? p[j] * scale : max;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; j++) {
    const float e = exp_f(p[j] * scale - max);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= t; j++) p[j] *= inv;
  memset(p + t + 1, 0, sizeof(float) * (size_t)(sp - t - 1));
}

// m [seq, nh, d] at (b, h) gathered into rows [sp, d] (rows past seq zero), or transposed into
// columns [d, sp].
static void gather_kv(const attn_shape *s, const float *m, int b, int h, float *dst, int transpose, int sp) {
  const int d = s->d;
  memset(dst, 0, sizeof(float) * (size_t)sp * d);
  for (int j = 0; j < s->seq; j++) {
    const float *mj = m + at(s, b, j, h, s->kv_heads);
    if (transpose)
      for (int i = 0; i < d; i++) dst[(long)i * sp + j] = mj[i];
    else
      memcpy(dst + (long)j * d, mj, sizeof(float) * (size_t)d);
  }
}

static inline int padded(int seq) { return (seq + W - 1) / W * W; }

static void attn_fwd_task(const attn_shape *s, const float *q, const float *k, const float *v, float *out,
                          float *probs, int b, int kvh, float *buf) {
  const int seq = s->seq, d = s->d, group = s->heads / s->kv_heads, sp = padded(seq);
  const float scale = (float)(1.0 / sqrt((double)d));
  float *kT = buf, *vh = buf + (long)sp * d, *p = vh + (long)sp * d;
  gather_kv(s, k, b, kvh, kT, 1, sp);
  gather_kv(s, v, b, kvh, vh, 0, sp);
  for (int h = kvh * group; h < (kvh + 1) * group; h++)
    for (int t = 0; t < seq; t++) {
      row_times_t(q + at(s, b, t, h, s->heads), kT, p, t / W + 1, d, sp);
      causal_softmax(p, t, sp, scale);
      memcpy(probs + (((long)b * s->heads + h) * seq + t) * seq, p, sizeof(float) * (size_t)seq);
      sum_rows(out + at(s, b, t, h, s->heads), p, 1, vh, d, 0, t + 1, d, 0);
    }
}

void to_attn_fwd(const float *q, const float *k, const float *v, float *out, float *probs, int rows,
                 int seq, int heads, int kv_heads, int d, int threads) {
  const attn_shape s = {rows, seq, heads, kv_heads, d};
  const int tasks = rows * kv_heads;
  const int th = threads < tasks ? threads : tasks;
  const size_t floats = (size_t)padded(seq) * (2 * (size_t)d + 1);
#pragma omp parallel num_threads(th) if (th > 1)
  {
    float *buf = malloc(sizeof(float) * floats);
#pragma omp for schedule(static)
    for (int task = 0; task < tasks; task++)
      if (buf) attn_fwd_task(&s, q, k, v, out, probs, task / kv_heads, task % kv_heads, buf);
    free(buf);
  }
}

// One query head of a task's backward: dS = P (dP - rowsum(P dP)) scale with dP = dO v^T
// (rows [seq, sp] in ds), then dq rows written, the kv head's dk, dv (dkl, dvl [sp, d])
// accumulated: dk[j] += sum over t of dS[t, j] q[t], dv[j] += sum over t of P[t, j] dO[t].
static void attn_bwd_head(const attn_shape *s, const float *q, const float *p, const float *dout, float *dq,
                          const float *kh, const float *vT, float *ds, float *dkl, float *dvl, int b, int h) {
  const int seq = s->seq, d = s->d, sp = padded(seq);
  const float scale = (float)(1.0 / sqrt((double)d));
  const long qs = (long)s->heads * d; // stride between positions of one head in q, dout, dq
  for (int t = 0; t < seq; t++) {
    float *dst = ds + (long)t * sp;
    const float *pt = p + (long)t * seq;
    row_times_t(dout + at(s, b, t, h, s->heads), vT, dst, t / W + 1, d, sp);
    double mean = 0;
#pragma omp simd reduction(+ : mean)
    for (int j = 0; j <= t; j++) mean += (double)pt[j] * dst[j];
    const float mf = (float)mean;
#pragma omp simd
    for (int j = 0; j <= t; j++) dst[j] = pt[j] * (dst[j] - mf) * scale;
    memset(dst + t + 1, 0, sizeof(float) * (size_t)(sp - t - 1));
    sum_rows(dq + at(s, b, t, h, s->heads), dst, 1, kh, d, 0, t + 1, d, 0);
  }
  const float *q0 = q + at(s, b, 0, h, s->heads);
  const float *do0 = dout + at(s, b, 0, h, s->heads);
  for (int j = 0; j < seq; j++) {
    sum_rows(dkl + (long)j * d, ds + j, sp, q0, qs, j, seq, d, 1);
    sum_rows(dvl + (long)j * d, p + j, seq, do0, qs, j, seq, d, 1);
  }
}

static void attn_bwd_task(const attn_shape *s, const float *q, const float *k, const float *v,
                          const float *probs, const float *dout, float *dq, float *dk, float *dv, int b,
                          int kvh, float *buf) {
  const int seq = s->seq, d = s->d, group = s->heads / s->kv_heads, sp = padded(seq);
  float *kh = buf, *vT = kh + (long)sp * d, *dkl = vT + (long)sp * d, *dvl = dkl + (long)sp * d;
  float *ds = dvl + (long)sp * d;
  gather_kv(s, k, b, kvh, kh, 0, sp);
  gather_kv(s, v, b, kvh, vT, 1, sp);
  memset(dkl, 0, sizeof(float) * 2 * (size_t)sp * d);
  for (int h = kvh * group; h < (kvh + 1) * group; h++)
    attn_bwd_head(s, q, probs + ((long)b * s->heads + h) * seq * seq, dout, dq, kh, vT, ds, dkl, dvl, b, h);
  for (int j = 0; j < seq; j++) {
    memcpy(dk + at(s, b, j, kvh, s->kv_heads), dkl + (long)j * d, sizeof(float) * (size_t)d);
    memcpy(dv + at(s, b, j, kvh, s->kv_heads), dvl + (long)j * d, sizeof(float) * (size_t)d);
  }
}

// dq is written, dk and dv overwritten with the sums over each kv head's query heads.
void to_attn_bwd(const float *q, const float *k, const float *v, const float *probs, const float *dout,
                 float *dq, float *dk, float *dv, int rows, int seq, int heads, int kv_heads, int d,
                 int threads) {
  const attn_shape s = {rows, seq, heads, kv_heads, d};
  const int tasks = rows * kv_heads;
  const int th = threads < tasks ? threads : tasks;
  const size_t floats = (size_t)padded(seq) * (4 * (size_t)d + (size_t)padded(seq));
#pragma omp parallel num_threads(th) if (th > 1)
  {
    float *buf = malloc(sizeof(float) * floats);
#pragma omp for schedule(static)
    for (int task = 0; task < tasks; task++)
      if (buf) attn_bwd_task(&s, q, k, v, probs, dout, dq, dk, dv, task / kv_heads, task % kv_heads, buf);
    free(buf);
  }
}
