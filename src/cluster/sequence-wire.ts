import { TandemError } from '../errors/index.js';
import type { Message } from './protocol.js';

/**
 * The serving requests of the control channel. A coordinator names each sequence by an id;
 * every node keeps a KV cache per id. `forward` runs tokens of one sequence (a prompt chunk),
 * `forward-batch` one token of each of several sequences (a decode step); `reset` lists the
 * ids whose caches start over before the step. The node whose rank returns logits answers
 * `{ logits }`: the rows' f32 logits, little-endian, base64, row after row.
 */
export interface ForwardRequest {
  seqs: number[];
  tokens: number[];
  /** true: one sequence, all tokens (prefill); false: one token per sequence (decode). */
  single: boolean;
  reset: number[];
}

/** Most sequences a node keeps a cache for at once. */
export const MAX_SEQUENCES = 1024;

function bad(what: string): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', `malformed serving request: ${what}`, {
    hint: 'run the same tandem version on the coordinator and the nodes',
  });
}

function ids(v: unknown, what: string, max: number): number[] {
  if (!Array.isArray(v) || !v.every((x) => Number.isInteger(x) && x >= 0 && x <= max)) throw bad(what);
  return v as number[];
}

/** Checks a `forward` or `forward-batch` message once, at the edge. */
export function parseForward(m: Message, vocab: number): ForwardRequest {
  const single = m.type === 'forward';
  const seqs = ids(m.seqs, 'seqs', 2 ** 31);
  const tokens = ids(m.tokens, `tokens (ids below ${vocab})`, vocab - 1);
  const reset = ids(m.reset ?? [], 'reset', 2 ** 31);
  if (seqs.length === 0 || tokens.length === 0) throw bad('no sequence or no token');
  if (single ? seqs.length !== 1 : seqs.length !== tokens.length || new Set(seqs).size !== seqs.length)
    throw bad(single ? 'forward takes one sequence' : 'forward-batch takes one token per distinct sequence');
  if (!reset.every((id) => seqs.includes(id))) throw bad('reset names a sequence the step does not carry');
  return { seqs, tokens, single, reset };
}

export function encodeLogits(rows: readonly Float32Array[]): string {
  return Buffer.concat(rows.map((r) => Buffer.from(r.buffer, r.byteOffset, r.byteLength))).toString('base64');
}

/** `n` rows of `vocab` logits from encodeLogits' text. */
export function decodeLogits(text: unknown, n: number, vocab: number): Float32Array[] {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'base64') : Buffer.alloc(0);
  if (bytes.byteLength !== n * vocab * 4)
    throw bad(`logits of ${bytes.byteLength} bytes for ${n} row(s) of ${vocab}`);
  const all = new Float32Array(n * vocab);
  new Uint8Array(all.buffer).set(bytes);
  return Array.from({ length: n }, (_, t) => all.subarray(t * vocab, (t + 1) * vocab));
}
