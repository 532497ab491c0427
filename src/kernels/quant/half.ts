/**
 * IEEE half (f16) and bfloat16 conversions for the quantisers: the kernels' one
 * implementation (../half.ts), bit-exact with ggml (round to nearest even; NaN stays NaN).
 */
export { f16ToF32Table as f16Table, f16ToF32, f32ToF16, bf16ToF32, f32ToBf16 } from '../half.js';
