import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { isTandemError, TandemError } from '../../errors/index.js';
import { byteSize, GgmlType, ggmlTypeInfo, quantize } from '../../kernels/quant/index.js';
import { TokenType } from '../tokenizer/metadata.js';
import { tokenizerMetadataFromHf } from '../tokenizer/tokenizer-json.js';
import { formatError } from './format-error.js';
import type { GgufValue } from './gguf-types.js';
import { gv, type TensorSpec } from './gguf-writer.js';
import { archMetadata, ggufArchOf, permutedRow, tensorRecipes, type TensorRecipe } from './hf-arch.js';
import { loadHfConfig, type HfConfig } from './hf-config.js';
import { sourceTensor, type SourceTensor } from './hf-tensors.js';
import { fileTypes, tensorType, type FileTypeName } from './model-plan.js';
import { SafetensorsModel } from './safetensors-model.js';
import { tokenizerEntries } from './tokenizer-gguf.js';

/** One GGUF tensor of a folder: its GGUF name, dims and type, and a reader of its rows in that type. */
export interface FolderTensor extends TensorSpec {
  /** Rows [start, start + count) as ggml bytes of `type` (rows = product of dims[1..]). */
  readRows(start: number, count: number): Uint8Array;
}

/** A model folder seen as a GGUF file: its metadata and tensors by their GGUF names. */
export interface ModelFolder {
  dir: string;
  arch: string;
  metadata: Map<string, GgufValue>;
  tensors: FolderTensor[];
  close(): void;
}

export interface OpenFolderOptions {
  /**
   * File type of the tensors (llama.cpp's per-tensor rules, as make-model applies them).
   * Default: keep what is stored (F32, F16, BF16; 1-D tensors and MoE routers F32), MLX
   * affine-quantized weights dequantized to F16.
   */
  type?: FileTypeName;
}

const FOLDER_HINT = 'pass the folder exactly as the model repository or mlx_lm.convert wrote it';

/** Whether `path` is a directory (a model folder, as opposed to a GGUF file). */
export function isModelFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function readJson(dir: string, name: string, required: boolean): unknown {
  const path = join(dir, name);
  if (!existsSync(path)) {
    if (!required) return undefined;
    throw formatError('MODEL_FOLDER_INCOMPLETE', dir, name, `the folder has no ${name}`, FOLDER_HINT);
  }
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw formatError(
      'MODEL_FORMAT_BAD_CONFIG',
      path,
      'json',
      `is not valid JSON (${(error as Error).message})`,
      FOLDER_HINT,
    );
  }
}

function openWeights(dir: string): SafetensorsModel {
  if (!readdirSync(dir).some((f) => f.endsWith('.safetensors'))) {
    throw formatError(
      'MODEL_FOLDER_INCOMPLETE',
      dir,
      'weights',
      'the folder has no .safetensors files',
      FOLDER_HINT,
    );
  }
  try {
    return SafetensorsModel.open(dir);
  } catch (error) {
    if (isTandemError(error) && error.code === 'MODEL_FORMAT_NOT_FOUND')
      throw new TandemError('MODEL_FOLDER_INCOMPLETE', error.message, {
        hint: FOLDER_HINT,
        cause: error,
        details: error.details,
      });
    throw error;
  }
}

/** The type a tensor is stored as when no file type is asked for (see OpenFolderOptions.type). */
function keptType(recipe: TensorRecipe, dims: readonly number[], sources: readonly SourceTensor[]): number {
  if (dims.length < 2 || recipe.gguf.includes('ffn_gate_inp')) return GgmlType.F32;
  const types = new Set(sources.map((s) => s.plainType ?? GgmlType.F16));
  return types.size === 1 ? ([...types][0] as number) : GgmlType.F32;
}

function dimsOf(recipe: TensorRecipe, sources: readonly SourceTensor[], dir: string): number[] {
  if (recipe.values) return [recipe.values.length];
  const first = sources[0] as SourceTensor;
  for (const s of sources) {
    if (s.shape.join() !== first.shape.join())
      throw formatError(
        'MODEL_FORMAT_BAD_DIMS',
        dir,
        `tensor ${s.name}`,
        `shape [${s.shape.join(', ')}] differs from ${first.name}'s [${first.shape.join(', ')}]`,
        FOLDER_HINT,
      );
  }
  const dims = [...first.shape].reverse();
  if (sources.length > 1) dims.push(sources.length);
  while (recipe.squeeze && dims.length > 1 && dims[dims.length - 1] === 1) dims.pop();
  return dims;
}

/** Reads GGUF rows from the parts, copying runs of consecutive source rows at once. */
function rowReader(
  recipe: TensorRecipe,
  sources: readonly SourceTensor[],
  type: number,
  cols: number,
): (start: number, count: number) => Uint8Array {
  const plain = sources.every((s) => s.plainType === type);
  const partRows = sources[0]?.rows ?? 1;
  const map = (r: number): [number, number] => {
    const local = r % partRows;
    const src = recipe.permuteHeads ? permutedRow(local, partRows, recipe.permuteHeads) : local;
    return [Math.floor(r / partRows), src];
  };
  return (start: number, count: number): Uint8Array => {
    if (recipe.values) return quantize(type, recipe.values.slice(start * cols, (start + count) * cols));
    const rowSize = plain ? byteSize(ggmlTypeInfo(type)!, cols) : cols * 4;
    const out = new Uint8Array(count * rowSize);
    for (let r = start; r < start + count;) {
      const [part, src] = map(r);
      let n = 1;
      while (r + n < start + count && map(r + n)[0] === part && map(r + n)[1] === src + n) n++;
      const s = sources[part] as SourceTensor;
      const f32 = plain ? undefined : s.readF32(src, n);
      const bytes = f32 ? new Uint8Array(f32.buffer, f32.byteOffset, f32.byteLength) : s.readPlain(src, n);
      out.set(bytes, (r - start) * rowSize);
      r += n;
    }
    return plain ? out : quantize(type, new Float32Array(out.buffer));
  };
}

function folderTensor(
  recipe: TensorRecipe,
  model: SafetensorsModel,
  config: HfConfig,
  pick: (recipe: TensorRecipe, dims: number[], sources: SourceTensor[]) => number,
): FolderTensor {
  const sources = recipe.parts.map((name) => {
    const s = sourceTensor(model, config, name);
    if (s === undefined)
      throw formatError(
        'MODEL_FOLDER_INCOMPLETE',
        model.dir,
        `tensor ${name}`,
        `is missing (it becomes ${recipe.gguf})`,
        FOLDER_HINT,
        { gguf: recipe.gguf },
      );
    return s;
  });
  const dims = dimsOf(recipe, sources, model.dir);
  const type = pick(recipe, dims, sources);
  return { name: recipe.gguf, dims, type, readRows: rowReader(recipe, sources, type, dims[0] as number) };
}

/** tokenizer.json (with tokenizer_config.json and config.json) as GGUF keys, padded to the embedding's rows as llama.cpp pads. */
function tokenizerMeta(dir: string, raw: unknown, vocabRows: number): [string, GgufValue][] {
  const tokenizerConfig = readJson(dir, 'tokenizer_config.json', false);
  const meta = tokenizerMetadataFromHf({
    tokenizer: readJson(dir, 'tokenizer.json', true),
    ...(tokenizerConfig !== undefined ? { tokenizerConfig } : {}),
    config: raw,
    where: dir,
  });
  const n = meta.tokens.length;
  if (n < vocabRows) {
    meta.tokens = [...meta.tokens, ...Array.from({ length: vocabRows - n }, (_, i) => `[PAD${n + i}]`)];
    if (meta.tokenTypes)
      meta.tokenTypes = Int32Array.from({ length: vocabRows }, (_, i) =>
        i < n ? (meta.tokenTypes![i] as number) : TokenType.unused,
      );
    if (meta.scores)
      meta.scores = Float32Array.from({ length: vocabRows }, (_, i) =>
        i < n ? (meta.scores![i] as number) : -1e9,
      );
  }
  return tokenizerEntries(meta);
}

/**
 * Opens a Hugging Face model folder (config.json, tokenizer.json, safetensors, optionally
 * sharded) or an MLX one (the same with affine-quantized weights) as GGUF metadata and tensors.
 * Reads only headers here; tensor bytes are read when asked for.
 */
export function openModelFolder(dir: string, options: OpenFolderOptions = {}): ModelFolder {
  if (!isModelFolder(dir)) {
    throw formatError(
      'MODEL_FOLDER_INCOMPLETE',
      dir,
      'folder',
      existsSync(dir) ? 'is a file, not a model folder (a GGUF file needs no conversion)' : 'does not exist',
      'pass the folder holding config.json, tokenizer.json and the .safetensors weights',
    );
  }
  const raw = readJson(dir, 'config.json', true);
  if (!existsSync(join(dir, 'tokenizer.json')))
    throw formatError(
      'MODEL_FOLDER_INCOMPLETE',
      dir,
      'tokenizer.json',
      'the folder has no tokenizer.json',
      FOLDER_HINT,
    );
  const config = loadHfConfig(join(dir, 'config.json'));
  const arch = ggufArchOf(config, join(dir, 'config.json'));
  const model = openWeights(dir);
  try {
    const { meta, ropeFactors } = archMetadata(arch, config, join(dir, 'config.json'));
    const recipes = tensorRecipes(arch, config, (n) => model.has(n), ropeFactors);
    const layers = config.numHiddenLayers;
    const tied = !recipes.some((r) => r.gguf === 'output.weight');
    const ft = options.type;
    const pick = (r: TensorRecipe, dims: number[], sources: SourceTensor[]): number =>
      ft === undefined
        ? keptType(r, dims, sources)
        : tensorType(
            r.gguf,
            dims,
            ft,
            layers,
            config.numExperts,
            r.gguf === 'output.weight' || (tied && r.gguf === 'token_embd.weight'),
          );
    const tensors = recipes.map((r) => folderTensor(r, model, config, pick));
    const embd = tensors.find((t) => t.name === 'token_embd.weight');
    const metadata = new Map<string, GgufValue>([
      ['general.architecture', gv.str(arch)],
      ['general.name', gv.str(basename(dir))],
    ]);
    if (ft !== undefined) metadata.set('general.file_type', gv.u32(fileTypes[ft].id));
    if (tensors.some((t) => t.type !== GgmlType.F32 && t.type !== GgmlType.F16 && t.type !== GgmlType.BF16))
      metadata.set('general.quantization_version', gv.u32(2));
    for (const [k, v] of meta) metadata.set(k, v);
    for (const [k, v] of tokenizerMeta(dir, raw, embd?.dims[1] ?? config.vocabSize)) metadata.set(k, v);
    return { dir, arch, metadata, tensors, close: () => model.close() };
  } catch (error) {
    model.close();
    throw error;
  }
}
