import type { LibraryHandle } from 'koffi';
import type { AttentionShape } from './attention.js';
import type { RopeTable } from './rope.js';
import type { AdamWStep, TrainOps } from './train-ops.js';

/**
 * ops-native.c's functions bound through koffi on the caller's typed arrays in place. Row-wise
 * and element-wise work is split over `threads` OpenMP threads (where the library has OpenMP);
 * no result depends on the thread count (ops-native.c says why).
 */

type Fn = (...args: unknown[]) => unknown;

export function bindNativeOps(lib: LibraryHandle, threads: number): TrainOps {
  const f = (decl: string): Fn => lib.func(decl) as Fn;
  const swigluFwd = f('void to_swiglu_fwd(const float *g, const float *u, float *h, long n, int threads)');
  const swigluBwd = f(
    'void to_swiglu_bwd(const float *g, const float *u, const float *dh, float *dg, float *du, long n, int threads)',
  );
  const rmsFwd = f(
    'void to_rmsnorm_fwd(const float *x, const float *w, double eps, float *y, float *r, int n, int dim, int threads)',
  );
  const rmsBwd = f(
    'void to_rmsnorm_bwd(const float *x, const float *w, const float *r, const float *dy, float *dx, float *dw, int n, int dim)',
  );
  const ce = f(
    'double to_cross_entropy(float *logits, const int *targets, int n, int vocab, double denominator, int threads)',
  );
  const rope = f(
    'void to_rope(float *x, const float *cos_t, const float *sin_t, int rows, int seq, int heads, int d, int sign)',
  );
  const attnFwd = f(
    'void to_attn_fwd(const float *q, const float *k, const float *v, float *out, float *probs, int rows, int seq, int heads, int kv_heads, int d, int threads)',
  );
  const attnBwd = f(
    'void to_attn_bwd(const float *q, const float *k, const float *v, const float *probs, const float *dout, float *dq, float *dk, float *dv, int rows, int seq, int heads, int kv_heads, int d, int threads)',
  );
  const add = f('void to_add(float *a, const float *b, long n)');
  const sumSquares = f('double to_sum_squares(const float *x, long n)');
  const scale = f('void to_scale(float *x, long n, float f)');
  const adamw = f(
    'void to_adamw(float *w, const float *g, float *m, float *v, const uint8_t *mask, long n, double lr, double beta1, double beta2, double eps, double c1, double c2, double decay, int threads)',
  );
  const fingerprint = f('void to_fingerprint(const float *x, long n, uint32_t *out)');
  const shape = (s: AttentionShape): number[] => [s.rows, s.seq, s.heads, s.kvHeads, s.headDim];
  return {
    name: 'native',
    rmsNormForward: (x, w, eps, y, r, n) => rmsFwd(x, w, eps, y, r, n, w.length, threads),
    rmsNormBackward: (x, w, r, dy, dx, dw, n) => rmsBwd(x, w, r, dy, dx, dw, n, w.length),
    swigluForward: (g, u, h) => swigluFwd(g, u, h, h.length, threads),
    swigluBackward: (g, u, dh, dg, du) => swigluBwd(g, u, dh, dg, du, dh.length, threads),
    crossEntropyInPlace: (logits, targets, n, vocab, denominator) =>
      ce(logits, targets, n, vocab, denominator, threads) as number,
    ropeApply: (x, t: RopeTable, rows, seq, heads, sign) =>
      rope(x, t.cos, t.sin, rows, seq, heads, t.headDim, sign),
    attentionForward: (s, q, k, v, out, probs) => attnFwd(q, k, v, out, probs, ...shape(s), threads),
    attentionBackward: (s, q, k, v, probs, dout, dq, dk, dv) =>
      attnBwd(q, k, v, probs, dout, dq, dk, dv, ...shape(s), threads),
    add: (a, b) => add(a, b, a.length),
    sumSquares: (x) => sumSquares(x, x.length) as number,
    scale: (x, factor) => scale(x, x.length, factor),
    adamw: (w, g, m, v, mask, s: AdamWStep) =>
      adamw(w, g, m, v, mask, w.length, s.lr, s.beta1, s.beta2, s.eps, s.c1, s.c2, s.decay, threads),
    fingerprint: (x, out) => fingerprint(x, x.length, out),
  };
}
