// The attention jobs' thread split, shared by the AVX-512 (ops.c) and NEON (ops-neon.c)
// builds: each includes this after defining its own per-item kernel
//   static void att_heads(const uint8_t *m, const float *qo, uint32_t k, uint32_t v, size_t kvo,
//                         size_t rowStride, int len, int hd, float scale, int half,
//                         float *scores, size_t hs, int nh, float *oo);
// (one item: nh consecutive heads of one token that share a kv head, over positions
// 0..len-1, head j's scores at scores + j * hs), so both split the items alike.
#ifndef TANDEM_ATTENTION_JOBS_H
#define TANDEM_ATTENTION_JOBS_H

// Heads of one kv group go in chunks of at most ATT_HEADS, split evenly (a group of 8: two of
// 4; of 6: two of 3), so that a token gives a few items per thread to share. A head's result
// does not depend on the chunk it is in.
#define ATT_HEADS 4

// Chunk ci (0 .. kvHeads * chunks - 1) of a token: its first head and its count of heads.
static inline int att_chunk(int ci, int group, int chunks, int *nh) {
  const int g = ci / chunks;
  const int j = ci % chunks;
  const int h0 = part(group, j, chunks);
  *nh = part(group, j + 1, chunks) - h0;
  return g * group + h0;
}

// q, out: [n, heads, hd] f32; k, v: [maxSeq, kvHeads, hd] (f32, or f16 when half); scores:
// per-thread scratch of scratchStride bytes, ATT_HEADS heads' scores of every position.
void tk_attention(uintptr_t base, uint32_t q, uint32_t k, uint32_t v, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads,
                  int hd, int pos0, float scale, int half, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int group = heads / kvHeads;
  const int chunks = (group + ATT_HEADS - 1) / ATT_HEADS;
  const int per = kvHeads * chunks;
  const size_t es = half ? 2 : 4;
  const size_t rowStride = (size_t)kvHeads * hd * es;
  float *scores = (float *)(m + scratch + (size_t)tid * scratchStride);
  const size_t hs = (size_t)scratchStride / (4 * ATT_HEADS);
  const int items = n * per;
  // Causal rows cost in proportion to their length, so a prompt's tokens are dealt round-robin
  // (contiguous shares gave the last thread the long rows); a few tokens share their items
  // contiguously. An item's arithmetic is the same whichever thread runs it.
  const int dealt = n >= 4 * nt;
  const int i0 = dealt ? tid * per : part(items, tid, nt);
  const int i1 = dealt ? items : part(items, tid + 1, nt);
  for (int item = i0; item < i1; item = dealt && item % per == per - 1 ? item + 1 + (nt - 1) * per : item + 1) {
    const int t = item / per;
    int nh;
    const int h = att_chunk(item % per, group, chunks, &nh);
    const size_t qo = ((size_t)t * heads + h) * hd;
    att_heads(m, (const float *)(m + q) + qo, k, v, (size_t)(h / group) * hd * es, rowStride, pos0 + t + 1, hd, scale, half, scores, hs, nh,
              (float *)(m + out) + qo);
  }
}

// Decode rows of n sequences in one job: row t's q [heads, hd] (at q + t * heads * hd floats)
// attends to its own cache, rows[3t] (K) and rows[3t + 1] (V) of one layer, over positions
// 0..rows[3t + 2]. Items (row, chunk) are split contiguously; each is tk_attention's item at
// n = 1, pos0 = rows[3t + 2], so a row gets the bits of a lone call.
void tk_attention_rows(uintptr_t base, uint32_t q, uint32_t rows, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads,
                       int hd, float scale, int half, int tid, int nt) {
  uint8_t *m = (uint8_t *)base;
  const int group = heads / kvHeads;
  const int chunks = (group + ATT_HEADS - 1) / ATT_HEADS;
  const int per = kvHeads * chunks;
  const size_t es = half ? 2 : 4;
  const size_t rowStride = (size_t)kvHeads * hd * es;
  const uint32_t *table = (const uint32_t *)(m + rows);
  float *scores = (float *)(m + scratch + (size_t)tid * scratchStride);
  const size_t hs = (size_t)scratchStride / (4 * ATT_HEADS);
  for (int item = part(n * per, tid, nt); item < part(n * per, tid + 1, nt); item++) {
    const int t = item / per;
    int nh;
    const int h = att_chunk(item % per, group, chunks, &nh);
    const size_t qo = ((size_t)t * heads + h) * hd;
    att_heads(m, (const float *)(m + q) + qo, table[3 * t], table[3 * t + 1], (size_t)(h / group) * hd * es, rowStride, (int)table[3 * t + 2] + 1, hd,
              scale, half, scores, hs, nh, (float *)(m + out) + qo);
  }
}

#endif
