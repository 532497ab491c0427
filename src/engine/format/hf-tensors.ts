import { GgmlType } from '../../kernels/quant/index.js';
import { formatError } from './format-error.js';
import type { HfConfig } from './hf-config.js';
import { checkMlxQuant, dequantizeMlx, type MlxQuant } from './mlx-quant.js';
import type { SafetensorsModel } from './safetensors-model.js';

/** Safetensors dtypes that map one-to-one onto a ggml type (the bytes are the same). */
const PLAIN: Readonly<Record<string, number>> = { F32: GgmlType.F32, F16: GgmlType.F16, BF16: GgmlType.BF16 };

/**
 * One weight of a model folder as the converter sees it: its logical row-major shape, rows of
 * `cols` elements (`rows` = product of every dim but the last), readable as f32 or, when it is
 * stored plainly, as the raw bytes of ggml type `plainType`.
 */
export interface SourceTensor {
  name: string;
  shape: readonly number[];
  rows: number;
  cols: number;
  /** The ggml type of the stored bytes, when they can be copied as they are (not quantized). */
  plainType?: number;
  /** The MLX layout, when the weight is stored quantized. */
  mlx?: MlxQuant;
  readF32(start: number, count: number): Float32Array;
  readPlain(start: number, count: number): Uint8Array;
}

const HINT = 'use the folder exactly as the model repository or mlx_lm.convert wrote it';

/** The quantization of config.json (`quantization`, or `quantization_config` in newer mlx-lm). */
function quantConfig(config: HfConfig): Record<string, unknown> | undefined {
  const q = config.raw.quantization ?? config.raw.quantization_config;
  return typeof q === 'object' && q !== null && !Array.isArray(q)
    ? (q as Record<string, unknown>)
    : undefined;
}

/** The MLX layout of module `module` (a weight name without `.weight`), honouring per-module overrides. */
function mlxQuantOf(config: HfConfig, module: string, file: string): MlxQuant {
  const q = quantConfig(config);
  if (q === undefined) {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      file,
      `tensor ${module}.weight`,
      'is stored quantized (it has .scales) but config.json has no "quantization" entry',
      HINT,
    );
  }
  const own = q[module];
  const src = typeof own === 'object' && own !== null ? (own as Record<string, unknown>) : q;
  const mode = src.mode ?? 'affine';
  if (mode !== 'affine') {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      file,
      'quantization.mode',
      `MLX mode ${JSON.stringify(mode)} is not supported (affine is)`,
      'use an affine-quantized (default mlx_lm.convert -q) or unquantized folder',
    );
  }
  const out = { groupSize: Number(src.group_size ?? 64), bits: Number(src.bits ?? 4) };
  checkMlxQuant(out, file);
  return out;
}

function plainTensor(model: SafetensorsModel, name: string): SourceTensor {
  const info = model.tensor(name);
  const cols = info.shape.length ? (info.shape[info.shape.length - 1] as number) : 1;
  const plainType = PLAIN[info.dtype];
  if (plainType === undefined) {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      model.dir,
      `tensor ${name} dtype`,
      `dtype ${info.dtype} is not supported here (F32, F16, BF16, or MLX affine-quantized U32 with scales and biases)`,
      HINT,
    );
  }
  return {
    name,
    shape: info.shape,
    rows: info.rows,
    cols,
    plainType,
    readF32: (start, count) => model.readTensorF32(name, { rows: [start, start + count] }),
    readPlain: (start, count) => model.readTensor(name, { rows: [start, start + count] }),
  };
}

function mlxTensor(model: SafetensorsModel, name: string, module: string, q: MlxQuant): SourceTensor {
  const info = model.tensor(name);
  const scales = model.tensor(`${module}.scales`);
  const biases = `${module}.biases`;
  if (!model.has(biases)) {
    throw formatError(
      'MODEL_FOLDER_INCOMPLETE',
      model.dir,
      `tensor ${biases}`,
      'is missing: MLX affine quantization stores a bias per group beside each scale',
      HINT,
    );
  }
  const packedCols = info.shape[info.shape.length - 1] ?? 0;
  const cols = (packedCols * 32) / q.bits;
  const shape = [...info.shape.slice(0, -1), cols];
  const groupCols = scales.shape[scales.shape.length - 1] ?? 0;
  if (info.dtype !== 'U32' || groupCols * q.groupSize !== cols || scales.rows !== info.rows) {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      model.dir,
      `tensor ${name}`,
      `${info.dtype} [${info.shape.join(', ')}] with scales [${scales.shape.join(', ')}] is not ${q.bits}-bit MLX affine with groups of ${q.groupSize}`,
      'check config.json "quantization" against the weights',
    );
  }
  return {
    name,
    shape,
    rows: info.rows,
    cols,
    mlx: q,
    readF32: (start, count) => {
      const rows: [number, number] = [start, start + count];
      return dequantizeMlx(
        model.readTensor(name, { rows }),
        model.readTensorF32(`${module}.scales`, { rows }),
        model.readTensorF32(biases, { rows }),
        count,
        cols,
        q,
      );
    },
    readPlain: () => {
      throw new Error(`${name} is quantized; read it with readF32`);
    },
  };
}

/**
 * The weight `name` of the folder, plain or MLX-quantized (a `.weight` with `.scales` beside
 * it), or undefined when the folder has no such tensor.
 */
export function sourceTensor(
  model: SafetensorsModel,
  config: HfConfig,
  name: string,
): SourceTensor | undefined {
  if (!model.has(name)) return undefined;
  const module = name.endsWith('.weight') ? name.slice(0, -'.weight'.length) : undefined;
  if (module !== undefined && model.has(`${module}.scales`))
    return mlxTensor(model, name, module, mlxQuantOf(config, module, model.dir));
  return plainTensor(model, name);
}
