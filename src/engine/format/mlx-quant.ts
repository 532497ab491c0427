import { formatError } from './format-error.js';

/**
 * MLX's affine quantization as mlx-lm writes it (mlx.core.quantize, mode "affine"): a weight
 * [..., rows, cols] is stored as
 * - `X.weight`: uint32 [..., rows, cols * bits / 32], each row a little-endian bit stream of
 *   `bits`-bit codes, code j in bits [j * bits, (j + 1) * bits) counted from the least
 *   significant bit of the row's first word;
 * - `X.scales` and `X.biases`: [..., rows, cols / groupSize] in the model's float dtype;
 * and element j of a row is `scales[j / groupSize] * code_j + biases[j / groupSize]`.
 */
export interface MlxQuant {
  groupSize: number;
  bits: number;
}

/** Bit widths whose codes never straddle a uint32 word (the ones read here). */
export const MLX_BITS: readonly number[] = [2, 4, 8];
export const MLX_GROUP_SIZES: readonly number[] = [32, 64, 128];

/** Throws unless `q` is a layout this reader decodes; `where` names the config or tensor. */
export function checkMlxQuant(q: MlxQuant, where: string): void {
  if (!MLX_BITS.includes(q.bits) || !MLX_GROUP_SIZES.includes(q.groupSize)) {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      where,
      'quantization',
      `MLX affine ${q.bits}-bit with groups of ${q.groupSize} is not supported (bits ${MLX_BITS.join('/')}, groups ${MLX_GROUP_SIZES.join('/')} are)`,
      'convert the model with mlx_lm.convert -q --q-bits 4 or 8, or use its unquantized folder',
    );
  }
}

/**
 * Dequantizes `rows` rows of `cols` elements: `packed` holds their uint32 words (little-endian
 * bytes), `scales` and `biases` their `cols / groupSize` group values each, as f32.
 */
export function dequantizeMlx(
  packed: Uint8Array,
  scales: Float32Array,
  biases: Float32Array,
  rows: number,
  cols: number,
  q: MlxQuant,
): Float32Array {
  const words = new Uint32Array(
    packed.buffer.slice(packed.byteOffset, packed.byteOffset + packed.byteLength),
  );
  const perWord = 32 / q.bits;
  const mask = (1 << q.bits) - 1;
  const wordsPerRow = cols / perWord;
  const groups = cols / q.groupSize;
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < cols; j++) {
      const word = words[r * wordsPerRow + Math.floor(j / perWord)] as number;
      const code = (word >>> ((j % perWord) * q.bits)) & mask;
      const g = r * groups + Math.floor(j / q.groupSize);
      out[r * cols + j] = (scales[g] as number) * code + (biases[g] as number);
    }
  }
  return out;
}
