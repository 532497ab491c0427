// Native twins of the f32 and i32 reductions in reduce.ts, for the collectives. Built lazily
// by reduce-native.ts (cc -O3 -march=native -fno-strict-aliasing) and called through koffi on
// the caller's typed arrays in place (no copy; they may live in shared memory).
//
// Semantics equal reduce.ts bit for bit: f32 sum is IEEE single addition; max/min return the
// canonical NaN 0xffc00000 (what V8's Math.max/Math.min store) when either operand is NaN,
// and +0 beats -0 (max) / -0 beats +0 (min); i32 sum wraps modulo 2^32.
#include <stdint.h>
#include <string.h>

enum { OP_SUM = 0, OP_MAX = 1, OP_MIN = 2 };

static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

void tr_f32(int op, float *restrict acc, const float *restrict other, int n) {
  if (op == OP_SUM) {
    for (int i = 0; i < n; i++) acc[i] = acc[i] + other[i];
    return;
  }
  uint32_t *restrict a = (uint32_t *)acc;
  const uint32_t *restrict b = (const uint32_t *)other;
  if (op == OP_MAX) {
    for (int i = 0; i < n; i++) {
      uint32_t ua = a[i], ub = b[i];
      float x = f_of(ua), y = f_of(ub);
      uint32_t r = x > y ? ua : y > x ? ub : (ua & ub);
      a[i] = (x != x || y != y) ? 0xffc00000u : r;
    }
  } else {
    for (int i = 0; i < n; i++) {
      uint32_t ua = a[i], ub = b[i];
      float x = f_of(ua), y = f_of(ub);
      uint32_t r = x < y ? ua : y < x ? ub : (ua | ub);
      a[i] = (x != x || y != y) ? 0xffc00000u : r;
    }
  }
}

void tr_i32(int op, int32_t *restrict acc, const int32_t *restrict other, int n) {
  if (op == OP_SUM) {
    uint32_t *restrict a = (uint32_t *)acc;
    const uint32_t *restrict b = (const uint32_t *)other;
    for (int i = 0; i < n; i++) a[i] = a[i] + b[i];
  } else if (op == OP_MAX) {
    for (int i = 0; i < n; i++) acc[i] = acc[i] > other[i] ? acc[i] : other[i];
  } else {
    for (int i = 0; i < n; i++) acc[i] = acc[i] < other[i] ? acc[i] : other[i];
  }
}

const char *tr_version(void) { return "tandem-reduce-1"; }
