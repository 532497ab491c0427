import { TandemError } from '../../errors/index.js';
import { GgufValueType, valueTypeNames, type GgufArray, type GgufValue } from './gguf-types.js';

/** Typed access to a GGUF file's key/value metadata, with errors that name the key. */
export class GgufMetadata {
  constructor(
    readonly entries: ReadonlyMap<string, GgufValue>,
    private readonly file = '<gguf>',
  ) {}

  has(key: string): boolean {
    return this.entries.has(key);
  }
  get(key: string): GgufValue | undefined {
    return this.entries.get(key);
  }
  keys(): string[] {
    return [...this.entries.keys()];
  }

  private bad(key: string, want: string, got: GgufValue | undefined): TandemError {
    return new TandemError(
      got === undefined ? 'MODEL_FORMAT_NOT_FOUND' : 'MODEL_FORMAT_BAD_METADATA',
      got === undefined
        ? `${this.file}: metadata key ${key} is missing (expected ${want})`
        : `${this.file}: metadata key ${key} is ${describe(got)}, expected ${want}`,
      {
        hint: 'the file was written for a different reader or is damaged; re-convert it',
        details: { file: this.file, field: key },
      },
    );
  }

  string(key: string): string {
    const v = this.entries.get(key);
    if (v?.type !== GgufValueType.STRING) throw this.bad(key, 'a string', v);
    return v.value as string;
  }
  optionalString(key: string): string | undefined {
    return this.entries.has(key) ? this.string(key) : undefined;
  }

  /** Any integer or float type, as a number (64-bit integers must be exact in a double). */
  number(key: string): number {
    const v = this.entries.get(key);
    if (
      v === undefined ||
      v.type === GgufValueType.STRING ||
      v.type === GgufValueType.ARRAY ||
      v.type === GgufValueType.BOOL
    ) {
      throw this.bad(key, 'a number', v);
    }
    if (typeof v.value === 'bigint') {
      if (v.value > BigInt(Number.MAX_SAFE_INTEGER) || v.value < -BigInt(Number.MAX_SAFE_INTEGER))
        throw this.bad(key, 'a number below 2^53', v);
      return Number(v.value);
    }
    return v.value as number;
  }
  optionalNumber(key: string): number | undefined {
    return this.entries.has(key) ? this.number(key) : undefined;
  }

  bool(key: string): boolean {
    const v = this.entries.get(key);
    if (v?.type !== GgufValueType.BOOL) throw this.bad(key, 'a bool', v);
    return v.value as boolean;
  }
  optionalBool(key: string): boolean | undefined {
    return this.entries.has(key) ? this.bool(key) : undefined;
  }

  array(key: string, itemType?: GgufValueType): GgufArray {
    const v = this.entries.get(key);
    const want = itemType === undefined ? 'an array' : `an array of ${valueTypeNames[itemType]}`;
    if (v?.type !== GgufValueType.ARRAY) throw this.bad(key, want, v);
    const arr = v.value as GgufArray;
    if (itemType !== undefined && arr.itemType !== itemType) throw this.bad(key, want, v);
    return arr;
  }
  strings(key: string): string[] {
    return this.array(key, GgufValueType.STRING).items as string[];
  }
  optionalStrings(key: string): string[] | undefined {
    return this.entries.has(key) ? this.strings(key) : undefined;
  }
}

export function describe(v: GgufValue): string {
  if (v.type === GgufValueType.ARRAY) {
    const arr = v.value as GgufArray;
    return `an array of ${arr.items.length} ${valueTypeNames[arr.itemType]}`;
  }
  return `a ${valueTypeNames[v.type]}`;
}
