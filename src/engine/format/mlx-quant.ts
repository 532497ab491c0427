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
  const wordsPerGroup = q.groupSize / perWord;
  const groups = (rows * cols) / q.groupSize;
  const out = new Float32Array(rows * cols);
  // Groups never straddle rows (cols is a multiple of groupSize), and words never straddle
  // groups (groupSize is a multiple of 32 / bits), so the codes run group by group, word by word.
  let o = 0;
  for (let g = 0; g < groups; g++) {
    const s = scales[g] as number;
    const b = biases[g] as number;
    for (let w = g * wordsPerGroup, end = w + wordsPerGroup; w < end; w++) {
      const word = words[w] as number;
      for (let k = 0; k < 32; k += q.bits) out[o++] = s * ((word >>> k) & mask) + b;
    }
  }
  return out;
}
