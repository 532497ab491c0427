/**
 * WGSL for y = x W^T over weights in their GPU layout (gpu-weights.ts). One workgroup of 64
 * threads computes one output y[t, r]: workgroup (r, t). The threads stride over the row's
 * blocks, each summing in f32, and a tree over workgroup memory adds the 64 partial sums.
 * The activation is in the weight type's dot type, as llama.cpp (types.ts): f32 for F32,
 * rounded to f16 for F16, q8_0 blocks (quantize_q8) for Q8_0 and Q4_0, whose dots are exact
 * integers per block (dot4I8Packed) times d_w * d_x.
 *
 * Parameters (binding 0): rows (of this chunk), cols, yStride (floats between tokens' rows
 * of y), yOffset (first output row of this chunk), wScales (word offset of the weight's
 * scales), xScales (word offset of the activation's scales).
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

const HEAD = /* wgsl */ `
struct P { rows: u32, cols: u32, yStride: u32, yOffset: u32, wScales: u32, xScales: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> part: array<f32, 64>;
${ROUND_F16}
${F16_TO_F32}

fn finish(s: f32, tid: u32, r: u32, t: u32) {
  part[tid] = s;
  workgroupBarrier();
  for (var k = 32u; k > 0u; k >>= 1u) {
    if (tid < k) { part[tid] += part[tid + k]; }
    workgroupBarrier();
  }
  if (tid == 0u) { y[t * p.yStride + p.yOffset + r] = part[0]; }
}
`;

const MAIN = (body: string): string => /* wgsl */ `${HEAD}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) tid: u32) {
  let r = wg.x;
  let t = wg.y;
  var s = 0.0;
  if (r < p.rows) {
${body}
  }
  finish(s, tid, min(r, p.rows - 1u), t);
}
`;

/** F32 weights [rows, cols], f32 activation [n, cols] (both read as bit patterns). */
export const MATMUL_F32 = MAIN(/* wgsl */ `
    let wo = r * p.cols;
    let xo = t * p.cols;
    for (var c = tid; c < p.cols; c += 64u) {
      s += bitcast<f32>(w[wo + c]) * bitcast<f32>(x[xo + c]);
    }`);

/** F16 weights as u32 pairs [rows, cols / 2]; the f32 activation is rounded to f16 first. */
export const MATMUL_F16 = MAIN(/* wgsl */ `
    let wo = r * (p.cols / 2u);
    let xo = t * p.cols;
    for (var c = tid; c < p.cols / 2u; c += 64u) {
      let pair = w[wo + c];
      s += f16ToF32(pair & 0xffffu) * roundF16(bitcast<f32>(x[xo + 2u * c]));
      s += f16ToF32(pair >> 16u) * roundF16(bitcast<f32>(x[xo + 2u * c + 1u]));
    }`);

/** Q8_0: quants packed 4 to a word [rows, cols / 4], then f32 scales [rows, cols / 32] at wScales. */
export const MATMUL_Q8_0 = MAIN(/* wgsl */ `
    let nb = p.cols / 32u;
    for (var b = tid; b < nb; b += 64u) {
      let wo = (r * nb + b) * 8u;
      let xo = (t * nb + b) * 8u;
      var sumi = 0;
      for (var j = 0u; j < 8u; j++) { sumi += dot4I8Packed(w[wo + j], x[xo + j]); }
      let d = bitcast<f32>(w[p.wScales + r * nb + b]) * bitcast<f32>(x[p.xScales + t * nb + b]);
      s += f32(sumi) * d;
    }`);

/**
 * Q4_0: ggml's 16 nibble bytes per block as 4 words [rows, cols / 8] (byte i: element i low,
 * element i + 16 high), then f32 scales at wScales. The dot takes the nibbles as 0..15 and
 * subtracts 8 * sum(x quants), exactly (q - 8) . x.
 */
export const MATMUL_Q4_0 = MAIN(/* wgsl */ `
    let nb = p.cols / 32u;
    for (var b = tid; b < nb; b += 64u) {
      let wo = (r * nb + b) * 4u;
      let xo = (t * nb + b) * 8u;
      var sumi = 0;
      var sumx = 0;
      for (var j = 0u; j < 4u; j++) {
        let q = w[wo + j];
        sumi += dot4I8Packed(q & 0x0f0f0f0fu, x[xo + j]) + dot4I8Packed((q >> 4u) & 0x0f0f0f0fu, x[xo + 4u + j]);
        sumx += dot4I8Packed(0x01010101u, x[xo + j]) + dot4I8Packed(0x01010101u, x[xo + 4u + j]);
      }
      let d = bitcast<f32>(w[p.wScales + r * nb + b]) * bitcast<f32>(x[p.xScales + t * nb + b]);
      s += f32(sumi - 8 * sumx) * d;
    }`);

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
const MATMUL_K = (six: boolean): string =>
  MAIN(/* wgsl */ `
    let nb = p.cols / 256u;
    for (var b = tid; b < nb; b += 64u) {
      let wo = (r * nb + b) * 70u;
      let xo = (t * nb + b) * 64u;
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
      let dx = bitcast<f32>(x[p.xScales + t * nb + b]);
      s += (bitcast<f32>(w[wo + 68u]) * dx) * f32(sumi) - (bitcast<f32>(w[wo + 69u]) * dx) * f32(summ);
    }`);

export const MATMUL_Q4K = MATMUL_K(false);
export const MATMUL_Q6K = MATMUL_K(true);

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
