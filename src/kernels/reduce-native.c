// Native twins of the reductions in reduce.ts, for the collectives. Built lazily by
// reduce-native.ts (cc -O3 -march=native -fno-strict-aliasing) and called through koffi on
// the caller's typed arrays in place (no copy; they may live in shared memory).
//
// Semantics equal reduce.ts bit for bit: f32 sum is IEEE single addition; max/min return the
// canonical NaN 0xffc00000 (what V8's Math.max/Math.min store) when either operand is NaN,
// and +0 beats -0 (max) / -0 beats +0 (min); i32 sum wraps modulo 2^32.
//
// f16/bf16 (raw 16-bit patterns): reduce.ts adds in float64 and rounds once, ties to even.
// Here both operands are decoded exactly to float, added in float and rounded once more to
// the narrow type: a double rounding, but an innocuous one, since float's 24-bit significand
// is at least 2p+2 for f16 (p = 11) and bf16 (p = 8), so a float sum rounded to p bits equals
// the exact sum rounded to p bits (Figueroa, "When is double rounding innocuous?", 1995; float
// also spans both types' exponent ranges; reduce.ts's float64 sum is exact for f16 and, for
// bf16 operands far apart, rounded innocuously by the same argument). Checked for all 2^32
// operand pairs of each type and op (docs/collectives.md). Every NaN result becomes
// reduce.ts's canonical quiet NaN, positive: f16 0x7e00, bf16 0x7fc0 (toF16/toBf16 of NaN).
// max/min pick one operand's bits, as reduce.ts's re-encoding of the chosen exact value does.
#include <stdint.h>
#include <string.h>

enum { OP_SUM = 0, OP_MAX = 1, OP_MIN = 2 };

static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

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

/** f16 bits -> float, exact: magnitude bits moved into float's place and rescaled by 2^112 (subnormals included); exponent 31 -> inf/NaN. */
static inline float f16_dec(uint32_t h) {
  uint32_t m = (h & 0x7fffu) << 13;
  uint32_t mag = (h & 0x7c00u) == 0x7c00u ? (m | 0x7f800000u) : u_of(f_of(m) * 0x1p112f);
  return f_of(mag | (h & 0x8000u) << 16);
}

/**
 * float -> f16 bits, round to nearest even (branch-free, so loops vectorise). Below 2^-14 the
 * float addition of 0.5 rounds onto the subnormal grid (2^-24 is 0.5's ulp); in the normal
 * range the exponent is rebiased (127 -> 15) and the 13 dropped bits rounded by carry, which
 * also carries into infinity from 65520 up; from 2^16 the result is infinity.
 */
static inline uint32_t f16_enc(float f) {
  uint32_t u = u_of(f), x = u & 0x7fffffffu;
  uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1)) >> 13;
  uint32_t sub = u_of(f_of(x) + 0.5f) - 0x3f000000u;
  uint32_t r = x < 0x38800000u ? sub : x >= 0x47800000u ? 0x7c00u : normal;
  return x > 0x7f800000u ? 0x7e00u : r | ((u >> 16) & 0x8000u);
}

static inline float bf16_dec(uint32_t h) { return f_of(h << 16); }

/** float -> bf16 bits, round to nearest even by carry (into infinity past the largest bf16). */
static inline uint32_t bf16_enc(float f) {
  uint32_t b = u_of(f);
  return (b & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : (b + 0x7fffu + ((b >> 16) & 1)) >> 16;
}

static inline float half_dec(int bf, uint32_t h) { return bf ? bf16_dec(h) : f16_dec(h); }
static inline uint32_t half_enc(int bf, float f) { return bf ? bf16_enc(f) : f16_enc(f); }

// One body for both half types; `bf` is a constant at each (inlined) call, so each loop is specialised.
static inline __attribute__((always_inline)) void tr_half(int bf, int op, uint16_t *restrict a, const uint16_t *restrict b, int n) {
  const uint32_t qnan = bf ? 0x7fc0u : 0x7e00u;
  if (op == OP_SUM) {
    for (int i = 0; i < n; i++) a[i] = (uint16_t)half_enc(bf, half_dec(bf, a[i]) + half_dec(bf, b[i]));
  } else if (op == OP_MAX) {
    for (int i = 0; i < n; i++) {
      uint32_t ua = a[i], ub = b[i];
      float x = half_dec(bf, ua), y = half_dec(bf, ub);
      uint32_t r = x > y ? ua : y > x ? ub : (ua & ub);
      a[i] = (uint16_t)((x != x || y != y) ? qnan : r);
    }
  } else {
    for (int i = 0; i < n; i++) {
      uint32_t ua = a[i], ub = b[i];
      float x = half_dec(bf, ua), y = half_dec(bf, ub);
      uint32_t r = x < y ? ua : y < x ? ub : (ua | ub);
      a[i] = (uint16_t)((x != x || y != y) ? qnan : r);
    }
  }
}

void tr_f16(int op, uint16_t *restrict acc, const uint16_t *restrict other, int n) { tr_half(0, op, acc, other, n); }
void tr_bf16(int op, uint16_t *restrict acc, const uint16_t *restrict other, int n) { tr_half(1, op, acc, other, n); }

const char *tr_version(void) { return "tandem-reduce-2"; }
