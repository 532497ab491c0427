// The attention jobs' thread split, shared by the AVX-512 (ops.c) and NEON (ops-neon.c)
// builds: each includes this after defining its own per-item kernel
//   static void att_one(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo,
//                       size_t rowStride, int len, int hd, float scale, int half, float *scores, float *oo);
// (one (token, head) item over positions 0..len-1), so both split the items alike.
#ifndef TANDEM_ATTENTION_JOBS_H
#define TANDEM_ATTENTION_JOBS_H

// q, out: [n, heads, hd] f32; k, v: [maxSeq, kvHeads, hd] (f32, or f16 when half); scores:
// per-thread scratch of scratchStride bytes. One (token, head) pair per work item.
void tk_attention(uintptr_t base, uint32_t q, uint32_t k, uint32_t v, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads,
                  int hd, int pos0, float scale, int half, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int group = heads / kvHeads;
  const size_t rowStride = (size_t)kvHeads * hd * (half ? 2 : 4);
  float *scores = (float *)(m + scratch + (size_t)tid * scratchStride);
  const int items = n * heads;
  // Causal rows cost in proportion to their length, so a prompt's tokens are dealt round-robin
  // (contiguous shares gave the last thread the long rows); a few tokens share their items
  // contiguously. An item's arithmetic is the same whichever thread runs it.
  const int dealt = n >= 4 * nt;
  const int i0 = dealt ? tid * heads : part(items, tid, nt);
  const int i1 = dealt ? items : part(items, tid + 1, nt);
  for (int item = i0; item < i1; item = dealt && item % heads == heads - 1 ? item + 1 + (nt - 1) * heads : item + 1) {
    const int h = item % heads;
    att_one(m, (const float *)(m + q) + (size_t)item * hd, k, v, (size_t)(h / group) * hd * (half ? 2 : 4), rowStride, pos0 + item / heads + 1, hd,
            scale, half, scores, (float *)(m + out) + (size_t)item * hd);
  }
}

// Decode rows of n sequences in one job: row t's q [heads, hd] (at q + t * heads * hd floats)
// attends to its own cache, rows[3t] (K) and rows[3t + 1] (V) of one layer, over positions
// 0..rows[3t + 2]. Items (row, head) are split contiguously; each is tk_attention's item at
// n = 1, pos0 = rows[3t + 2], so a row gets the bits of a lone call.
void tk_attention_rows(uintptr_t base, uint32_t q, uint32_t rows, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads,
                       int hd, float scale, int half, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int group = heads / kvHeads;
  const size_t rowStride = (size_t)kvHeads * hd * (half ? 2 : 4);
  const uint32_t *table = (const uint32_t *)(m + rows);
  float *scores = (float *)(m + scratch + (size_t)tid * scratchStride);
  for (int item = part(n * heads, tid, nt); item < part(n * heads, tid + 1, nt); item++) {
    const int t = item / heads;
    const int h = item % heads;
    att_one(m, (const float *)(m + q) + (size_t)item * hd, table[3 * t], table[3 * t + 1], (size_t)(h / group) * hd * (half ? 2 : 4), rowStride,
            (int)table[3 * t + 2] + 1, hd, scale, half, scores, (float *)(m + out) + (size_t)item * hd);
  }
}

#endif
