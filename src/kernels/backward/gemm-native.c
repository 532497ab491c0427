// Native twin of gemm.ts's three f32 training products (row-major), called through koffi on
// the caller's Float32Arrays in place, and split over OpenMP threads when compiled with it.
//   mode 0 nt: c[m, n] = a[m, k] . b[n, k]^T    (forward y = x W^T)
//   mode 1 nn: c[m, n] = a[m, k] . b[k, n]      (dX = dY W)
//   mode 2 tn: c[m, n] = a[k, m]^T . b[k, n]    (dW = dY^T X)
// `acc` != 0 adds the product to c. Every output is one f32 sum over k in increasing k (fused
// multiply-adds), started from 0 and added to c once at the end, whatever the thread count
// and wherever the output lies: the result does not depend on `threads`.
//
// Blocking: c is cut into panels of NR = 32 columns; a thread packs its panel's b (k x 32,
// zero-padded past n) contiguously, then sweeps the rows MR = 6 at a time with 12 vector
// accumulators (6 rows x 2 vectors of 16 floats). Threads take whole panels. tn's a is first
// packed once per call into row blocks of 6 (pack_a), shared read-only by the threads.
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MR 6
#define NR 32

typedef float vf __attribute__((vector_size(64)));

static inline vf ld(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void st(float *p, vf v) { memcpy(p, &v, sizeof v); }

// t[r, 0..32) = sum over p of A(r, p) * bp[p, 0..32), A(r, p) = a[r * ars + p * aps]
static inline __attribute__((always_inline)) void kern(int R, const float *a, long ars, long aps,
                                                       const float *bp, int k, float *t) {
  vf c0[MR], c1[MR];
  for (int r = 0; r < R; r++) {
    c0[r] = (vf){0};
    c1[r] = (vf){0};
  }
  for (int p = 0; p < k; p++) {
    const vf b0 = ld(bp + (long)p * NR);
    const vf b1 = ld(bp + (long)p * NR + 16);
    for (int r = 0; r < R; r++) {
      const float x = a[r * ars + p * aps];
      c0[r] += x * b0;
      c1[r] += x * b1;
    }
  }
  for (int r = 0; r < R; r++) {
    st(t + r * NR, c0[r]);
    st(t + r * NR + 16, c1[r]);
  }
}

static void kern_rows(int R, const float *a, long ars, long aps, const float *bp, int k, float *t) {
  switch (R) {
  case 6: kern(6, a, ars, aps, bp, k, t); break;
  case 5: kern(5, a, ars, aps, bp, k, t); break;
  case 4: kern(4, a, ars, aps, bp, k, t); break;
  case 3: kern(3, a, ars, aps, bp, k, t); break;
  case 2: kern(2, a, ars, aps, bp, k, t); break;
  default: kern(1, a, ars, aps, bp, k, t); break;
  }
}

// bp[p, q] = B(p, j0 + q) for q < w, 0 past it; B(p, j) = b[j * k + p] (nt) or b[p * n + j]
static void pack(int mode, const float *b, float *bp, int j0, int w, int n, int k) {
  if (mode == 0) {
    for (int q = 0; q < NR; q++) {
      if (q < w) {
        const float *row = b + (long)(j0 + q) * k;
        for (int p = 0; p < k; p++) bp[(long)p * NR + q] = row[p];
      } else {
        for (int p = 0; p < k; p++) bp[(long)p * NR + q] = 0;
      }
    }
    return;
  }
  for (int p = 0; p < k; p++) {
    float *dst = bp + (long)p * NR;
    memcpy(dst, b + (long)p * n + j0, sizeof(float) * w);
    for (int q = w; q < NR; q++) dst[q] = 0;
  }
}

static void panel(int mode, const float *a, const float *b, float *c, int m, int n, int k, int acc,
                  int jp, float *bp) {
  // mode 2 reads a packed by pack_a: row block i0's A(r, p) at a[i0 * k + p * MR + r]
  const long ars = mode == 0 || mode == 1 ? k : 1;
  const long aps = mode == 2 ? MR : 1;
  const int j0 = jp * NR;
  const int w = n - j0 < NR ? n - j0 : NR;
  float t[MR * NR];
  pack(mode, b, bp, j0, w, n, k);
  for (int i0 = 0; i0 < m; i0 += MR) {
    const int R = m - i0 < MR ? m - i0 : MR;
    const float *ab = mode == 2 ? a + (long)i0 * k : a + (long)i0 * ars;
    kern_rows(R, ab, ars, aps, bp, k, t);
    for (int r = 0; r < R; r++) {
      float *cr = c + (long)(i0 + r) * n + j0;
      const float *tr = t + r * NR;
      if (acc)
        for (int q = 0; q < w; q++) cr[q] += tr[q];
      else
        memcpy(cr, tr, sizeof(float) * w);
    }
  }
}

// tn's a [k, m] into row blocks of MR: block i0 holds A(r, p) = a[p * m + i0 + r] at
// ap[i0 * k + p * MR + r], so that the kernel reads it in order (a's own rows are m floats
// apart, which for m a multiple of 256 puts every p in the same few cache sets).
static void pack_a(const float *a, float *ap, int m, int k) {
  for (int i0 = 0; i0 < m; i0 += MR) {
    const int R = m - i0 < MR ? m - i0 : MR;
    float *dst = ap + (long)i0 * k;
    for (int p = 0; p < k; p++)
      for (int r = 0; r < MR; r++) dst[(long)p * MR + r] = r < R ? a[(long)p * m + i0 + r] : 0;
  }
}

// Products below this many multiply-adds run on the calling thread alone: waking the other
// threads costs more than their share.
#define SMALL_JOB (1L << 18)

void tg_gemm(int mode, const float *a, const float *b, float *c, int m, int n, int k, int acc,
             int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!acc) memset(c, 0, sizeof(float) * (size_t)m * n);
    return;
  }
  const int panels = (n + NR - 1) / NR;
  const size_t bytes = ((sizeof(float) * (size_t)k * NR) + 63) & ~(size_t)63;
  int th = threads < panels ? threads : panels;
  if ((long)m * n * k < SMALL_JOB) th = 1;
  float *ap = NULL;
  if (mode == 2) {
    const size_t blocks = (size_t)(m + MR - 1) / MR;
    ap = aligned_alloc(64, ((sizeof(float) * blocks * MR * (size_t)k) + 63) & ~(size_t)63);
    if (!ap) return;
    pack_a(a, ap, m, k);
    a = ap;
  }
  if (th <= 1) {
    float *bp = aligned_alloc(64, bytes);
    for (int jp = 0; jp < panels; jp++) panel(mode, a, b, c, m, n, k, acc, jp, bp);
    free(bp);
    free(ap);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(th)
  {
    float *bp = aligned_alloc(64, bytes);
#pragma omp for schedule(static)
    for (int jp = 0; jp < panels; jp++) panel(mode, a, b, c, m, n, k, acc, jp, bp);
    free(bp);
  }
#else
  float *bp = aligned_alloc(64, bytes);
  for (int jp = 0; jp < panels; jp++) panel(mode, a, b, c, m, n, k, acc, jp, bp);
  free(bp);
#endif
  free(ap);
}

// Whether this build splits work over threads (compiled with OpenMP).
int tg_threaded(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
