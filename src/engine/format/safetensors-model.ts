import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { formatError } from './format-error.js';
import { loadHfConfig, type HfConfig } from './hf-config.js';
import { SafetensorsFile, type SafetensorsTensorInfo } from './safetensors.js';

const INDEX = 'model.safetensors.index.json';
const HINT =
  'use the folder exactly as the model repository ships it (config.json, *.safetensors and the index)';

/**
 * A Hugging Face model folder: config.json plus one `model.safetensors` or several shards
 * listed by `model.safetensors.index.json`. Shards are opened once; reads go to the shard
 * holding each tensor.
 */
export class SafetensorsModel {
  private constructor(
    readonly dir: string,
    readonly config: HfConfig | undefined,
    private readonly files: SafetensorsFile[],
    private readonly where: Map<string, SafetensorsFile>,
  ) {}

  static open(dir: string): SafetensorsModel {
    const configPath = join(dir, 'config.json');
    const config = existsSync(configPath) ? loadHfConfig(configPath) : undefined;
    const indexPath = join(dir, INDEX);
    const shardNames = existsSync(indexPath) ? readIndex(indexPath) : undefined;
    const files: SafetensorsFile[] = [];
    const where = new Map<string, SafetensorsFile>();
    try {
      const names = shardNames ? [...new Set(shardNames.values())].sort() : ['model.safetensors'];
      for (const name of names) {
        const path = join(dir, name);
        if (!existsSync(path) || !statSync(path).isFile())
          throw formatError('MODEL_FORMAT_NOT_FOUND', dir, name, 'shard file is missing', HINT);
        const file = SafetensorsFile.open(path);
        files.push(file);
        for (const t of file.tensors) {
          const other = where.get(t.name);
          if (other)
            throw formatError(
              'MODEL_FORMAT_DUPLICATE',
              dir,
              `tensor ${t.name}`,
              `is in both ${basename(other.file)} and ${name}`,
              HINT,
            );
          where.set(t.name, file);
        }
      }
      if (shardNames) {
        for (const [tensor, shard] of shardNames) {
          const file = where.get(tensor);
          if (file === undefined || basename(file.file) !== shard) {
            throw formatError(
              'MODEL_FORMAT_NOT_FOUND',
              dir,
              `tensor ${tensor}`,
              `the index puts it in ${shard} but it is not there`,
              HINT,
            );
          }
        }
      }
    } catch (error) {
      for (const f of files) f.close();
      throw error;
    }
    return new SafetensorsModel(dir, config, files, where);
  }

  has(name: string): boolean {
    return this.where.has(name);
  }

  get tensorNames(): string[] {
    return [...this.where.keys()];
  }

  private fileOf(name: string): SafetensorsFile {
    const f = this.where.get(name);
    if (f === undefined)
      throw formatError(
        'MODEL_FORMAT_NOT_FOUND',
        this.dir,
        `tensor ${name}`,
        'no tensor of that name in the model',
        HINT,
      );
    return f;
  }

  tensor(name: string): SafetensorsTensorInfo {
    return this.fileOf(name).tensor(name);
  }
  readTensor(name: string, options: { rows?: readonly [number, number] } = {}): Uint8Array {
    return this.fileOf(name).readTensor(name, options);
  }
  readTensorF32(name: string, options: { rows?: readonly [number, number] } = {}): Float32Array {
    return this.fileOf(name).readTensorF32(name, options);
  }

  close(): void {
    for (const f of this.files) f.close();
  }
}

/** The index's weight_map: tensor name -> shard file name (a plain name inside the folder). */
function readIndex(path: string): Map<string, string> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw formatError(
      'MODEL_FORMAT_BAD_HEADER',
      path,
      'json',
      `is not valid JSON (${(error as Error).message})`,
      HINT,
    );
  }
  const map = (json as { weight_map?: unknown } | null)?.weight_map;
  if (typeof map !== 'object' || map === null || Array.isArray(map))
    throw formatError('MODEL_FORMAT_BAD_HEADER', path, 'weight_map', 'is missing or not an object', HINT);
  const out = new Map<string, string>();
  for (const [tensor, shard] of Object.entries(map)) {
    if (typeof shard !== 'string' || !/^[\w.-]+\.safetensors$/.test(shard) || shard.startsWith('.')) {
      throw formatError(
        'MODEL_FORMAT_BAD_HEADER',
        path,
        `weight_map.${tensor}`,
        `${JSON.stringify(shard)} is not a .safetensors file name inside the folder`,
        HINT,
      );
    }
    out.set(tensor, shard);
  }
  return out;
}
