export {
  GgmlType,
  QK_K,
  allGgmlTypes,
  byteSize,
  ggmlTypeByName,
  ggmlTypeInfo,
  supportedType,
  type GgmlTypeId,
  type GgmlTypeInfo,
  type GgmlTypeName,
} from './types.js';
export { bf16ToF32, f16Table, f16ToF32, f32ToBf16, f32ToF16 } from './half.js';
export { dequantize, quantize } from './quantize.js';
export { getScaleMinK4 } from './k-common.js';
