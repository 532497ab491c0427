import { TandemError } from '../errors/index.js';
import type { Message } from './protocol.js';

/**
 * The serving requests of the control channel. A coordinator names each sequence by an id;
 * every node keeps a KV cache per id. `forward` runs tokens of one sequence (a prompt chunk),
 * `forward-batch` one token of each of several sequences (a decode step), `forward-mixed` both
 * in one step (MixedRequest); `reset` lists the ids whose caches start over before the step.
 * The node whose rank returns logits answers `{ logits }`: the rows' f32 logits,
 * little-endian, base64, row after row (a mixed step: the piece's last token's row first).
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

/**
 * A `forward-mixed` step: a prompt piece of one sequence and one decode token of each of
 * others, which every node runs in one forward (forwardMixedOnRank). On the wire:
 * `{ prefill: { seq, tokens }, decode: { seqs, tokens }, reset, onePass }`.
 */
export interface MixedRequest {
  prefill: { seq: number; tokens: number[] };
  /** One token per sequence, tokens[t] at the next position of seqs[t]; none of them the prefill's. */
  decode: { seqs: number[]; tokens: number[] };
  reset: number[];
  /** Every rank of the placement runs the two in one pass (runsMixedInOnePass); false: the piece, then the rows. */
  onePass: boolean;
}

const fields = (v: unknown): Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

/** Checks a `forward-mixed` message once, at the edge. */
export function parseMixed(m: Message, vocab: number): MixedRequest {
  const p = fields(m.prefill);
  const d = fields(m.decode);
  const tokensOf = (v: unknown, what: string): number[] => ids(v, `${what} (ids below ${vocab})`, vocab - 1);
  const seq = p.seq;
  if (!(Number.isInteger(seq) && (seq as number) >= 0 && (seq as number) <= 2 ** 31))
    throw bad('prefill.seq is not a sequence id');
  const prefill = { seq: seq as number, tokens: tokensOf(p.tokens, 'prefill.tokens') };
  const decode = { seqs: ids(d.seqs, 'decode.seqs', 2 ** 31), tokens: tokensOf(d.tokens, 'decode.tokens') };
  const reset = ids(m.reset ?? [], 'reset', 2 ** 31);
  if (prefill.tokens.length === 0 || decode.seqs.length === 0) throw bad('no prompt piece or no decode row');
  if (decode.seqs.length !== decode.tokens.length || new Set(decode.seqs).size !== decode.seqs.length)
    throw bad('forward-mixed takes one decode token per distinct sequence');
  if (decode.seqs.includes(prefill.seq)) throw bad("forward-mixed takes the prompt piece's sequence once");
  if (!reset.every((id) => id === prefill.seq || decode.seqs.includes(id)))
    throw bad('reset names a sequence the step does not carry');
  if (typeof m.onePass !== 'boolean') throw bad('onePass is not a boolean');
  return { prefill, decode, reset, onePass: m.onePass };
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
