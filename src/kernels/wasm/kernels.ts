// Entry of tandem's WebAssembly SIMD kernels (compiled by bin/build.js with asc).
export { quant_q8_0, quant_q8_k, quant_part } from './quantize';
export { mm_q8_0, mm_q4_0, repack_q } from './matmul-q8';
export { mm_k } from './matmul-k';
export { mm_float } from './matmul-float';
export { attention, store_f16, round_x, swiglu } from './attention';
