import { dotSteps, matmulHead } from './wgsl-matmul.js';

/**
 * WGSL for a mixture-of-experts FFN recorded without a read-back: the router's softmax and
 * top-k write each expert's list of slots on the GPU (ROUTE_TOPK), the expert matmuls read
 * their rows through those lists (LISTED_*), and COMBINE adds each token's weighted expert
 * outputs. A slot is one (token, choice) pair: slot = t * used + j, so every slot belongs to
 * exactly one expert and the experts write disjoint rows of the slot buffers.
 *
 * The lists buffer (u32): counts [experts], then expert e's slots at experts + e * n + c for
 * c < counts[e], ascending (a token picks an expert at most once, so n entries suffice).
 */

/**
 * Softmax over each token's router logits and its top `used` experts (the largest
 * probability first, ties to the lower id, as the CPU's `route`), weights renormalised to sum
 * to 1 when `norm`; then each expert's list of slots. One workgroup of 64 threads: tokens
 * one a thread (t, t + 64, ...), then experts likewise. probs: [n, experts] (turned into
 * probabilities in place); ids: [n, used] u32; weights: [n, used] f32.
 */
export const ROUTE_TOPK = /* wgsl */ `
struct P { n: u32, experts: u32, used: u32, norm: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> probs: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> lists: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) tid: u32) {
  for (var t = tid; t < p.n; t += 64u) {
    let o = t * p.experts;
    var m = probs[o];
    for (var e = 1u; e < p.experts; e++) { m = max(m, probs[o + e]); }
    var sum = 0.0;
    for (var e = 0u; e < p.experts; e++) { let v = exp(probs[o + e] - m); probs[o + e] = v; sum += v; }
    let inv = 1.0 / sum;
    for (var e = 0u; e < p.experts; e++) { probs[o + e] = probs[o + e] * inv; }
    var total = 0.0;
    for (var j = 0u; j < p.used; j++) {
      var best = 0xffffffffu;
      var bestP = -1.0;
      for (var e = 0u; e < p.experts; e++) {
        var taken = false;
        for (var i = 0u; i < j; i++) { taken = taken || ids[t * p.used + i] == e; }
        if (!taken && probs[o + e] > bestP) { best = e; bestP = probs[o + e]; }
      }
      ids[t * p.used + j] = best;
      weights[t * p.used + j] = bestP;
      total += bestP;
    }
    if (p.norm != 0u) {
      for (var j = 0u; j < p.used; j++) { weights[t * p.used + j] = weights[t * p.used + j] / total; }
    }
  }
  storageBarrier();
  workgroupBarrier();
  for (var e = tid; e < p.experts; e += 64u) {
    var c = 0u;
    for (var s = 0u; s < p.n * p.used; s++) {
      if (ids[s] == e) { lists[p.experts + e * p.n + c] = s; c++; }
    }
    lists[e] = c;
  }
}
`;

/**
 * One expert's matmul over the slots in its list: workgroup (r, c) computes output row r of
 * the c-th slot s of expert p.expert (none past its count), reading activation row s / p.div
 * (div = used: the token's normed input; 1: the slot's own hidden row) and writing
 * y[s * yStride + yOffset + r]. p.n is the tokens of the step (each list's capacity). Each
 * output's sums are those of the per-row matmul (wgsl-matmul.ts).
 */
const LISTED = (type: string): string => /* wgsl */ `${matmulHead}
@group(0) @binding(4) var<storage, read> lists: array<u32>;
var<workgroup> part: array<f32, 64>;

fn acc(s: f32, r: u32, t: u32, i: u32) -> f32 {
${dotSteps(type).acc}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r = wg.x;
  let c = wg.y;
  if (c >= lists[p.expert]) { return; }
  let slot = lists[p.experts + p.expert * p.n + c];
  let t = slot / p.div;
  var s = 0.0;
  if (r < p.rows) {
    for (var i = tid; i < ${dotSteps(type).steps}; i += 64u) { s = acc(s, r, t, i); }
  }
  part[tid] = s;
  workgroupBarrier();
  for (var k = 32u; k > 0u; k >>= 1u) {
    if (tid < k) { part[tid] += part[tid + k]; }
    workgroupBarrier();
  }
  if (tid == 0u && r < p.rows) { y[slot * p.yStride + p.yOffset + r] = part[0]; }
}
`;

const listed = new Map<string, string>();

/** The listed matmul of a weight type ('f32', 'f16', 'q8_0', 'q4_0', 'q4k', 'q6k'), built once. */
export function listedMatmul(type: string): string {
  let code = listed.get(type);
  if (!code) listed.set(type, (code = LISTED(type)));
  return code;
}

/**
 * out[t, i] = sum over token t's choices in ascending expert id of weight * y[slot, i], one
 * thread per (t, i): the CPU's combineRouted order. y: [n * used, width]; out: [n, width].
 */
export const COMBINE = /* wgsl */ `
struct P { n: u32, used: u32, width: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let id = g.x + g.y * 65535u * 64u;
  if (id >= p.n * p.width) { return; }
  let t = id / p.width;
  let i = id % p.width;
  var s = 0.0;
  var last = -1;
  for (var q = 0u; q < p.used; q++) {
    var j = 0u;
    var e = 0x7fffffff;
    for (var k = 0u; k < p.used; k++) {
      let v = i32(ids[t * p.used + k]);
      if (v > last && v < e) { e = v; j = k; }
    }
    if (e == 0x7fffffff) { break; }
    last = e;
    s += weights[t * p.used + j] * y[(t * p.used + j) * p.width + i];
  }
  out[id] = s;
}
`;

/**
 * The shared expert's gate (qwen2moe): out[t] += sigmoid(x[t] . gate) * y[t], one 64-thread
 * workgroup per token. x, y, out: [n, width]; gate: [width].
 */
export const SHARED_GATE = /* wgsl */ `
struct P { width: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let o = wg.x * p.width;
  var s = 0.0;
  for (var i = tid; i < p.width; i += 64u) { s += x[o + i] * gate[i]; }
  part[tid] = s;
  workgroupBarrier();
  for (var k = 32u; k > 0u; k >>= 1u) {
    if (tid < k) { part[tid] += part[tid + k]; }
    workgroupBarrier();
  }
  let g = 1.0 / (1.0 + exp(-part[0]));
  for (var i = tid; i < p.width; i += 64u) { out[o + i] += g * y[o + i]; }
}
`;
