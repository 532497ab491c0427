/**
 * WGSL for the element-wise and per-token kernels of a llama layer. Each follows its
 * TypeScript twin in ref/ops-ref.ts step by step in f32 (the twin sums in f64 where ggml
 * does; here sums are f32 tree sums, hence the tolerances in the tests).
 */

/** RMSNorm, one 256-thread workgroup per token. x, out: [n, dim] (distinct buffers); w: [dim]. */
export const RMS_NORM = /* wgsl */ `
struct P { dim: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let o = wg.x * p.dim;
  var s = 0.0;
  for (var i = tid; i < p.dim; i += 256u) { let v = x[o + i]; s += v * v; }
  part[tid] = s;
  workgroupBarrier();
  for (var k = 128u; k > 0u; k >>= 1u) {
    if (tid < k) { part[tid] += part[tid + k]; }
    workgroupBarrier();
  }
  let scale = 1.0 / sqrt(part[0] / f32(p.dim) + p.eps);
  for (var i = tid; i < p.dim; i += 256u) { out[o + i] = (x[o + i] * scale) * w[i]; }
}
`;

/**
 * RoPE in place, one thread per rotated pair. x: [n, heads, headDim]; cs: cos [n, half] then
 * sin [n, half], computed on the host by ropeAngles (the twin's own angles, so only the
 * rotation runs here). neox: pairs (i, i + half), else (2i, 2i + 1).
 */
export const ROPE = /* wgsl */ `
struct P { n: u32, heads: u32, headDim: u32, half: u32, neox: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> cs: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let id = g.x;
  if (id >= p.n * p.heads * p.half) { return; }
  let i = id % p.half;
  let th = id / p.half;
  let t = th / p.heads;
  let o = th * p.headDim;
  let a = select(o + 2u * i, o + i, p.neox != 0u);
  let b = select(o + 2u * i + 1u, o + i + p.half, p.neox != 0u);
  let c = cs[t * p.half + i];
  let s = cs[(p.n + t) * p.half + i];
  let x0 = x[a];
  let x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
`;

/** out = silu(gate) * up, one thread per element. All [len]. */
export const SWIGLU = /* wgsl */ `
struct P { len: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x + g.y * 65535u * 64u;
  if (i >= p.len) { return; }
  let v = gate[i];
  out[i] = (v / (1.0 + exp(-v))) * up[i];
}
`;

/** The residual add x += y, one thread per element. Both [len]. */
export const ADD = /* wgsl */ `
struct P { len: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x + g.y * 65535u * 64u;
  if (i >= p.len) { return; }
  x[i] += y[i];
}
`;

/** x[t, i] += b[i] for the n rows of x [n, len] (qwen2's q/k/v biases), one thread per element. */
export const ADD_BIAS = /* wgsl */ `
struct P { total: u32, len: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x + g.y * 65535u * 64u;
  if (i >= p.total) { return; }
  x[i] += b[i % p.len];
}
`;

/** dst[dstOffset + i] = src[srcOffset + i] for i < len: K/V rows into the cache, a token's row out. */
export const COPY = /* wgsl */ `
struct P { len: u32, dstOffset: u32, srcOffset: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x + g.y * 65535u * 64u;
  if (i >= p.len) { return; }
  dst[p.dstOffset + i] = src[p.srcOffset + i];
}
`;

/**
 * Causal grouped-query attention over an f32 cache, one 64-thread workgroup per (head,
 * token). q, out: [rows, heads, hd]; k, v: [maxSeq, kvHeads, hd]; scores: scratch [rows,
 * heads, stride]. Workgroup (h, t) takes row t0 + t, which sees positions 0..pos0+t (a
 * batched decode step dispatches each row with its own cache, t0 and pos0). Softmax as the
 * twin: max, exp(s - max), sum; the output is the exp-weighted sum of V times 1 / sum. Head
 * h reads KV head (h + hOff) / group (a shard's heads may start inside a KV group).
 */
export const ATTENTION = /* wgsl */ `
struct P { heads: u32, kvHeads: u32, hd: u32, pos0: u32, stride: u32, t0: u32, group: u32, hOff: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
var<workgroup> red: array<f32, 64>;

fn reduce(value: f32, tid: u32, isMax: bool) -> f32 {
  red[tid] = value;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (tid < s) { red[tid] = select(red[tid] + red[tid + s], max(red[tid], red[tid + s]), isMax); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let h = wg.x;
  let t = wg.y;
  let len = p.pos0 + t + 1u;
  let kvh = (h + p.hOff) / p.group;
  let qo = ((p.t0 + t) * p.heads + h) * p.hd;
  let so = ((p.t0 + t) * p.heads + h) * p.stride;
  var m = bitcast<f32>(0xff7fffffu); // -FLT_MAX
  for (var j = tid; j < len; j += 64u) {
    let ko = (j * p.kvHeads + kvh) * p.hd;
    var s = 0.0;
    for (var i = 0u; i < p.hd; i++) { s += q[qo + i] * k[ko + i]; }
    s *= p.scale;
    scores[so + j] = s;
    m = max(m, s);
  }
  m = reduce(m, tid, true);
  var sum = 0.0;
  for (var j = tid; j < len; j += 64u) {
    let e = exp(scores[so + j] - m);
    scores[so + j] = e;
    sum += e;
  }
  sum = reduce(sum, tid, false);
  storageBarrier();
  let inv = 1.0 / sum;
  for (var i = tid; i < p.hd; i += 64u) {
    var o = 0.0;
    for (var j = 0u; j < len; j++) { o += scores[so + j] * v[(j * p.kvHeads + kvh) * p.hd + i]; }
    out[qo + i] = o * inv;
  }
}
`;
