import { readFile } from 'node:fs/promises';
import { TandemError } from '../../errors/index.js';
import { Rng } from '../sampling/rng.js';
import type { Tokenizer } from '../tokenizer/index.js';

/** FNV-1a (32-bit) over the token ids, hex: the data's fingerprint in a checkpoint. */
export function hashTokens(tokens: ArrayLike<number>): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] as number;
    h = Math.imul(h ^ (t & 0xffff), 0x01000193);
    h = Math.imul(h ^ (t >>> 16), 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

/** Reads a UTF-8 text file and tokenizes it (BOS first) with the model's tokenizer. */
export async function tokenizeFile(path: string, tokenizer: Tokenizer, seq: number): Promise<Int32Array> {
  const text = await readFile(path, 'utf8').catch((e: unknown) => {
    throw new TandemError(
      'TRAIN_DATA',
      `cannot read the training data ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`,
      {
        hint: 'pass --data with a UTF-8 text file',
        details: { path },
      },
    );
  });
  const tokens = Int32Array.from(tokenizer.encode(text, { addBos: true }));
  if (tokens.length < seq + 2)
    throw new TandemError(
      'TRAIN_DATA',
      `${path} holds ${tokens.length} tokens, fewer than one training row of --seq ${seq} + 1`,
      { hint: 'give more text, or a smaller --seq', details: { path, tokens: tokens.length, seq } },
    );
  return tokens;
}

/**
 * The batch of update `step`: `rows` windows of seq + 1 tokens at offsets drawn from a
 * generator seeded by (seed, step) alone, so a resumed run, or a data-parallel rank taking
 * rows [first, first + count), reads exactly what an uninterrupted single run reads.
 */
export function batchAt(
  tokens: Int32Array,
  seed: number,
  step: number,
  rows: number,
  seq: number,
  first = 0,
  count = rows,
): Int32Array {
  const rng = new Rng((Math.imul(seed, 0x9e3779b1) ^ Math.imul(step + 1, 0x85ebca6b)) >>> 0);
  const span = tokens.length - seq - 1;
  const out = new Int32Array(count * (seq + 1));
  for (let r = 0; r < rows; r++) {
    const at = Math.floor(rng.next() * (span + 1));
    if (r >= first && r < first + count) out.set(tokens.subarray(at, at + seq + 1), (r - first) * (seq + 1));
  }
  return out;
}

/** The distinct input token ids of a rows x (seq + 1) batch (each row's first seq tokens), ascending. */
export function inputIds(batch: Int32Array, rows: number, seq: number): Int32Array {
  const ids = new Set<number>();
  for (let b = 0; b < rows; b++) for (let t = 0; t < seq; t++) ids.add(batch[b * (seq + 1) + t] as number);
  return Int32Array.from(ids).sort();
}
