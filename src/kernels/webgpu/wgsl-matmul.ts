/**
 * WGSL for y = x W^T over weights in their GPU layout (gpu-weights.ts), in two shapes: MATVEC
 * (one workgroup per output, for decode rows) and TILED (one workgroup per tile of rows x
 * tokens, for prefill), both over a weight type's DotSteps, so an output's float sums are
 * the same in both. The activation is in the weight type's dot type, as llama.cpp
 * (types.ts): f32 for F32, rounded to f16 for F16, q8_0 blocks (quantize_q8) for Q8_0 and
 * Q4_0, whose dots are exact integers per block (dot4I8Packed) times d_w * d_x.
 *
 * Parameters (binding 0): rows (of this chunk), cols, yStride (floats between tokens' rows
 * of y), yOffset (first output row of this chunk), wScales (word offset of the weight's
 * scales), xScales (word offset of the activation's scales), n (tokens; TILED and the MoE's
 * listed matmuls), expert, experts, div (the listed matmuls only, wgsl-moe.ts).
 */

/**
 * f32 to the nearest f16 value, ties to even (WGSL's pack2x16float leaves the rounding
 * direction to the implementation; lavapipe truncates): the mantissa rounded to 10 bits in
 * f16's normal range, to a multiple of 2^-24 below it (f16's subnormals; WGSL's round is
 * half-to-even and scaling by 2^24 is exact).
 */
const ROUND_F16 = /* wgsl */ `
fn roundF16(v: f32) -> f32 {
  if (abs(v) < 6.1035156e-5) { return round(v * 16777216.0) * 5.9604645e-8; }
  let b = bitcast<u32>(v);
  return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}
`;

/**
 * The f16 bit pattern h (low 16 bits) as f32, subnormals included: WGSL lets
 * unpack2x16float flush them to zero (lavapipe does), and weights N(0, 0.02) hold many.
 */
const F16_TO_F32 = /* wgsl */ `
fn f16ToF32(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) { return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604645e-8)); }
  if (e == 31u) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}
`;

/** The parameters and bindings every matmul shares (the listed MoE matmuls too). */
export const matmulHead = /* wgsl */ `
struct P { rows: u32, cols: u32, yStride: u32, yOffset: u32, wScales: u32, xScales: u32, n: u32, expert: u32, experts: u32, div: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
${ROUND_F16}
${F16_TO_F32}
`;

/**
 * A weight type's part of a matmul: `acc(s, r, t, i)` adds the i-th step of row r's dot with
 * token t's activation to the running sum s (a step is an element, a pair or a block), and
 * `steps` is the WGSL expression of how many steps a row has.
 */
export interface DotSteps {
  steps: string;
  acc: string;
}

/**
 * One workgroup per output y[t, r] (workgroup (r, t)): thread tid sums steps tid, tid + 64,
 * ... in order, then a tree over workgroup memory adds the 64 partial sums. The decode path:
 * each row's bits come from its own workgroup, whatever else is dispatched beside it.
 */
const MATVEC = (d: DotSteps): string => /* wgsl */ `${matmulHead}
var<workgroup> part: array<f32, 64>;

fn acc(s: f32, r: u32, t: u32, i: u32) -> f32 {
${d.acc}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r = wg.x;
  let t = wg.y;
  var s = 0.0;
  if (r < p.rows) {
    for (var i = tid; i < ${d.steps}; i += 64u) { s = acc(s, r, t, i); }
  }
  part[tid] = s;
  workgroupBarrier();
  for (var k = 32u; k > 0u; k >>= 1u) {
    if (tid < k) { part[tid] += part[tid + k]; }
    workgroupBarrier();
  }
  if (tid == 0u && r < p.rows) { y[t * p.yStride + p.yOffset + r] = part[0]; }
}
`;

/** Rows and tokens of one tile of the tiled matmul (TILE_ROWS x TILE_TOKENS outputs per workgroup). */
export const TILE_ROWS = 4;
export const TILE_TOKENS = 8;
const TILE = TILE_ROWS * TILE_TOKENS;

/**
 * The prefill matmul: one workgroup per tile of TILE_ROWS rows x TILE_TOKENS tokens. Thread
 * tid walks steps tid, tid + 64, ... once for the whole tile, so a weight step is fetched
 * once per tile and reused (from registers and cache) for every token of it, and an
 * activation step for every row. Each output's partial sums and their tree are MATVEC's,
 * the same f32 expressions in the same order: a token's outputs do not depend on whether
 * they were computed tiled or alone. Partials: [TILE outputs, 64 threads] in workgroup memory.
 */
const TILED = (d: DotSteps): string => /* wgsl */ `${matmulHead}
var<workgroup> part: array<f32, ${TILE * 64}>;

fn acc(s: f32, r: u32, t: u32, i: u32) -> f32 {
${d.acc}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r0 = wg.x * ${TILE_ROWS}u;
  let t0 = wg.y * ${TILE_TOKENS}u;
  let nr = min(${TILE_ROWS}u, p.rows - min(r0, p.rows));
  let nt = min(${TILE_TOKENS}u, p.n - min(t0, p.n));
  var s: array<f32, ${TILE}>;
  for (var i = tid; i < ${d.steps}; i += 64u) {
    for (var a = 0u; a < nr; a++) {
      for (var b = 0u; b < nt; b++) {
        let o = a * ${TILE_TOKENS}u + b;
        s[o] = acc(s[o], r0 + a, t0 + b, i);
      }
    }
  }
  for (var o = 0u; o < ${TILE}u; o++) { part[o * 64u + tid] = s[o]; }
  workgroupBarrier();
  for (var k = 32u; k > 0u; k >>= 1u) {
    if (tid < k) {
      for (var o = 0u; o < ${TILE}u; o++) { part[o * 64u + tid] += part[o * 64u + tid + k]; }
    }
    workgroupBarrier();
  }
  if (tid < ${TILE}u) {
    let a = tid / ${TILE_TOKENS}u;
    let b = tid % ${TILE_TOKENS}u;
    if (a < nr && b < nt) { y[(t0 + b) * p.yStride + p.yOffset + r0 + a] = part[tid * 64u]; }
  }
}
`;

/** F32 weights [rows, cols], f32 activation [n, cols] (both read as bit patterns); a step is an element. */
const F32_DOT: DotSteps = {
  steps: 'p.cols',
  acc: /* wgsl */ `
  return s + bitcast<f32>(w[r * p.cols + i]) * bitcast<f32>(x[t * p.cols + i]);`,
};

/** F16 weights as u32 pairs [rows, cols / 2]; the f32 activation is rounded to f16 first; a step is a pair. */
const F16_DOT: DotSteps = {
  steps: '(p.cols / 2u)',
  acc: /* wgsl */ `
  let pair = w[r * (p.cols / 2u) + i];
  let xo = t * p.cols + 2u * i;
  let s1 = s + f16ToF32(pair & 0xffffu) * roundF16(bitcast<f32>(x[xo]));
  return s1 + f16ToF32(pair >> 16u) * roundF16(bitcast<f32>(x[xo + 1u]));`,
};

/** Q8_0: quants packed 4 to a word [rows, cols / 4], then f32 scales [rows, cols / 32] at wScales; a step is a block. */
const Q8_0_DOT: DotSteps = {
  steps: '(p.cols / 32u)',
  acc: /* wgsl */ `
  let nb = p.cols / 32u;
  let wo = (r * nb + i) * 8u;
  let xo = (t * nb + i) * 8u;
  var sumi = 0;
  for (var j = 0u; j < 8u; j++) { sumi += dot4I8Packed(w[wo + j], x[xo + j]); }
  let d = bitcast<f32>(w[p.wScales + r * nb + i]) * bitcast<f32>(x[p.xScales + t * nb + i]);
  return s + f32(sumi) * d;`,
};

/**
 * Q4_0: ggml's 16 nibble bytes per block as 4 words [rows, cols / 8] (byte i: element i low,
 * element i + 16 high), then f32 scales at wScales. The dot takes the nibbles as 0..15 and
 * subtracts 8 * sum(x quants), exactly (q - 8) . x.
 */
const Q4_0_DOT: DotSteps = {
  steps: '(p.cols / 32u)',
  acc: /* wgsl */ `
  let nb = p.cols / 32u;
  let wo = (r * nb + i) * 4u;
  let xo = (t * nb + i) * 8u;
  var sumi = 0;
  var sumx = 0;
  for (var j = 0u; j < 4u; j++) {
    let q = w[wo + j];
    sumi += dot4I8Packed(q & 0x0f0f0f0fu, x[xo + j]) + dot4I8Packed((q >> 4u) & 0x0f0f0f0fu, x[xo + 4u + j]);
    sumx += dot4I8Packed(0x01010101u, x[xo + j]) + dot4I8Packed(0x01010101u, x[xo + 4u + j]);
  }
  let d = bitcast<f32>(w[p.wScales + r * nb + i]) * bitcast<f32>(x[p.xScales + t * nb + i]);
  return s + f32(sumi - 8 * sumx) * d;`,
};

export const MATMUL_F32 = MATVEC(F32_DOT);
export const MATMUL_F16 = MATVEC(F16_DOT);
export const MATMUL_Q8_0 = MATVEC(Q8_0_DOT);
export const MATMUL_Q4_0 = MATVEC(Q4_0_DOT);
export const TILED_F32 = TILED(F32_DOT);
export const TILED_F16 = TILED(F16_DOT);
export const TILED_Q8_0 = TILED(Q8_0_DOT);
export const TILED_Q4_0 = TILED(Q4_0_DOT);

/**
 * llama.cpp's q8_0 activation quantisation, one thread per 32-element block: d = f16(amax /
 * 127), quants round-half-even(x * 127 / amax) (WGSL's round is half-to-even), packed 4 to a
 * word. x: [blocks * 32] f32; q: quants [blocks * 8] words, then scales [blocks] at `scales`.
 */
export const QUANTIZE_Q8 = /* wgsl */ `
struct P { blocks: u32, scales: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;
${ROUND_F16}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let b = g.x;
  if (b >= p.blocks) { return; }
  var amax = 0.0;
  for (var i = 0u; i < 32u; i++) { amax = max(amax, abs(x[b * 32u + i])); }
  let d = roundF16(amax / 127.0);
  let id = select(0.0, 127.0 / amax, amax != 0.0);
  for (var j = 0u; j < 8u; j++) {
    let o = b * 32u + j * 4u;
    let v = vec4i(round(vec4f(x[o], x[o + 1u], x[o + 2u], x[o + 3u]) * id));
    q[b * 8u + j] = pack4xI8(v);
  }
  q[p.scales + b] = bitcast<u32>(d);
}
`;

/**
 * The K-quants (Q4_K, Q5_K, Q6_K) in one repacked layout (gpu-weights.ts), 70 words per
 * 256-element super-block: quants as i8 [64 words] (Q6_K's q - 32, Q4_K/Q5_K's 0..15/0..31),
 * 16 sub-block scale bytes [4 words] (Q6_K: 16 signed scales of 16 elements; Q4_K/Q5_K: 8
 * scales then 8 mins of 32 elements), d and dmin as f32. The activation is q8_K (QUANTIZE_Q8K):
 * the integer sums per sub-block times their scales are exact, then scaled by d * d_x as
 * llama.cpp's vec_dot_q*_K_q8_K. `six` picks Q6_K's sub-blocks.
 */
const K_DOT = (six: boolean): DotSteps => ({
  steps: '(p.cols / 256u)',
  acc: /* wgsl */ `
  let nb = p.cols / 256u;
  let wo = (r * nb + i) * 70u;
  let xo = (t * nb + i) * 64u;
  var sumi = 0;
  var summ = 0;
  ${
    six
      ? `for (var g = 0u; g < 16u; g++) {
    var si = 0;
    for (var j = 0u; j < 4u; j++) { si += dot4I8Packed(w[wo + 4u * g + j], x[xo + 4u * g + j]); }
    sumi += extractBits(i32(w[wo + 64u + g / 4u]), 8u * (g % 4u), 8u) * si;
  }`
      : `for (var g = 0u; g < 8u; g++) {
    var si = 0;
    var sx = 0;
    for (var j = 0u; j < 8u; j++) {
      let xv = x[xo + 8u * g + j];
      si += dot4I8Packed(w[wo + 8u * g + j], xv);
      sx += dot4I8Packed(0x01010101u, xv);
    }
    sumi += i32(extractBits(w[wo + 64u + g / 4u], 8u * (g % 4u), 8u)) * si;
    summ += i32(extractBits(w[wo + 66u + g / 4u], 8u * (g % 4u), 8u)) * sx;
  }`
  }
  let dx = bitcast<f32>(x[p.xScales + t * nb + i]);
  return s + ((bitcast<f32>(w[wo + 68u]) * dx) * f32(sumi) - (bitcast<f32>(w[wo + 69u]) * dx) * f32(summ));`,
});

/** A weight type's dot steps by kernel name suffix ('f32', 'f16', 'q8_0', 'q4_0', 'q4k', 'q6k'). */
export function dotSteps(type: string): DotSteps {
  const steps: Record<string, DotSteps> = {
    f32: F32_DOT,
    f16: F16_DOT,
    q8_0: Q8_0_DOT,
    q4_0: Q4_0_DOT,
    q4k: K_DOT(false),
    q6k: K_DOT(true),
  };
  const d = steps[type];
  if (!d) throw new Error(`no WGSL dot steps for '${type}'`);
  return d;
}

export const MATMUL_Q4K = MATVEC(K_DOT(false));
export const MATMUL_Q6K = MATVEC(K_DOT(true));
export const TILED_Q4K = TILED(K_DOT(false));
export const TILED_Q6K = TILED(K_DOT(true));

/**
 * llama.cpp's q8_K activation quantisation, one thread per 256-element block: iscale =
 * -127 / (the element of largest magnitude, with its sign), quants min(127, round-half-even(
 * iscale * x)) packed 4 to a word, d = 1 / iscale (0 for an all-zero block). x: [blocks * 256];
 * q: quants [blocks * 64] words, then scales [blocks] at `scales`.
 */
export const QUANTIZE_Q8K = /* wgsl */ `
struct P { blocks: u32, scales: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  let b = g.x;
  if (b >= p.blocks) { return; }
  var amax = 0.0;
  var mx = 0.0;
  for (var i = 0u; i < 256u; i++) {
    let v = x[b * 256u + i];
    if (abs(v) > amax) { amax = abs(v); mx = v; }
  }
  let iscale = select(0.0, -127.0 / mx, amax != 0.0);
  for (var j = 0u; j < 64u; j++) {
    let o = b * 256u + j * 4u;
    let v = min(vec4i(round(vec4f(x[o], x[o + 1u], x[o + 2u], x[o + 3u]) * iscale)), vec4i(127));
    q[b * 64u + j] = pack4xI8(v);
  }
  q[p.scales + b] = bitcast<u32>(select(0.0, 1.0 / iscale, amax != 0.0));
}
`;
