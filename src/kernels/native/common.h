// Shared by the native kernels (x86: kernels.c, gemm-vnni.c, ops.c, kquant.c, kquant-gemm.c, q4-vnni.c;
// arm64: the *-neon.c files, see neon.h): includes, the thread split and f16 helpers. Every kernel takes `base` (the WebAssembly memory's address) and byte
// offsets into it; thread tid of nt computes [part(total, tid), part(total, tid + 1)).
#ifndef TK_COMMON_H
#define TK_COMMON_H
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

// Bytes ahead of a streamed weight row to prefetch (measured: 2-8 KiB all reach DRAM bandwidth).
#define PREFETCH 4096

// Tokens from which a matmul may take a batched (GEMM) kernel whose sums run in another order
// than a one-token matvec's (types.ts GEMM_TOKENS; tk_gemm_tokens lets the loader check it).
#define GEMM_TOKENS 12

// A thread's buffer of at least `bytes` (64-byte aligned) in *buf, grown to the largest asked
// for and kept; NULL when it cannot be had. `buf` and `cap` are the caller's __thread variables.
static inline void *thread_buf(void **buf, size_t *cap, size_t bytes) {
  if (bytes > *cap) {
    free(*buf);
    *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    *cap = *buf ? bytes : 0;
  }
  return *buf;
}

static inline int part(int total, int tid, int nt) { return (int)(((int64_t)total * tid) / nt); }

// Byte offset of the claims counter in every kernels memory: one int in the cache line below
// the arena's first allocation (wasm-arena.ts CLAIMS_OFFSET; tk_claims_offset lets the loader
// check that the two agree). The pool zeroes it before every job it runs on several threads.
#define TK_CLAIMS ((1u << 20) - 64u)

// Units of work handed out as the threads of one job get to them. With one thread the first
// take is all `total` units; with nt, every thread takes chunks of about total / (16 nt) from
// the job's counter until none are left, so a thread that starts late (woken from sleep) or
// runs slower (its core shared) takes fewer. A unit's results depend only on the unit, so
// they are the same bits whichever thread computes them.
typedef struct {
  int *next;
  int local;
  int total;
  int chunk;
} tk_claims;

static inline tk_claims claims_open(uintptr_t base, int total, int nt) {
  tk_claims c = {nt > 1 ? (int *)(base + TK_CLAIMS) : NULL, 0, total, nt > 1 ? (total + 16 * nt - 1) / (16 * nt) : total};
  if (c.chunk < 1) c.chunk = 1;
  return c;
}

// The next units [*a, *b) of this thread; 0 once the job has none left.
static inline int claims_take(tk_claims *c, int *a, int *b) {
  int s;
  if (c->next) {
    s = __atomic_fetch_add(c->next, c->chunk, __ATOMIC_RELAXED);
  } else {
    s = c->local;
    c->local += c->chunk;
  }
  if (s >= c->total) return 0;
  *a = s;
  *b = c->total - s < c->chunk ? c->total : s + c->chunk;
  return 1;
}

// Little-endian u16 at p (ggml's f16 scale fields, unaligned).
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

#if defined(__AVX512BW__) || (defined(__AVX2__) && defined(__F16C__))
// f16 bit pattern -> f32 (exact, subnormals included).
static inline float f16(uint16_t h) {
  union { uint32_t u; float f; } a, m;
  a.u = (uint32_t)(h & 0x7fff) << 13;
  m.u = 0x77800000u; // 2^112
  const float v = a.f * m.f;
  return (h & 0x8000) ? -v : v;
}

// f32 -> nearest f16 value (round to nearest even), as f32.
static inline float round_f16(float v) { return _cvtsh_ss(_cvtss_sh(v, 0)); }

#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
// f16 bit pattern -> f32 (exact) and f32 -> nearest-even f16 value as f32 (the FPCR's default
// rounding), through the IEEE __fp16 type that AArch64 compilers provide.
static inline float f16(uint16_t h) {
  __fp16 v;
  __builtin_memcpy(&v, &h, 2);
  return (float)v;
}
static inline float round_f16(float v) { return (float)(__fp16)v; }
#define PREFETCH_R(p) __builtin_prefetch((const void *)(p), 0, 3)
#endif
#endif
