import { isTandemError, TandemError } from '../errors/index.js';
import { greedyPick } from '../engine/sampling/index.js';
import type { LogitsNeed, RowResult } from '../engine/model/comm.js';
import type { Message } from './protocol.js';

/**
 * The serving requests of the control channel. A coordinator names each sequence by an id;
 * every node keeps a KV cache per id. `forward` runs tokens of one sequence (a prompt chunk),
 * `forward-batch` one token of each of several sequences (a decode step), `forward-mixed` both
 * in one step (MixedRequest); `reset` lists the ids whose caches start over before the step, and
 * `keep` pairs `[id, positions]` for caches cut back to their first positions before it (a
 * prompt that starts as the slot's last one did: only the rest is prefilled).
 * `needs` says what the coordinator uses of each row's logits, in answer order (a mixed
 * step: the piece's last token's row first); absent, every row's logits. The node whose
 * rank returns logits answers `{ logits, argmax }`: the 'argmax' rows' token ids
 * (greedyPick), and the f32 logits (little-endian, base64, row after row) of the 'logits' rows
 * and of any 'argmax' row that cannot be picked (a NaN or +Infinity in it: its id is null,
 * and the server's sampler refuses the row for its request alone), each in row order; a
 * 'none' row is not answered.
 */
export interface ForwardRequest {
  seqs: number[];
  tokens: number[];
  /** true: one sequence, all tokens (prefill); false: one token per sequence (decode). */
  single: boolean;
  reset: number[];
  /** [id, positions]: the caches cut back to their first positions before the step. */
  keep: [number, number][];
  /** One per answered row: the prefill's last token, or each decode row. */
  needs: LogitsNeed[];
}

/** Most sequences a node keeps a cache for at once. */
export const MAX_SEQUENCES = 1024;

function bad(what: string): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', `malformed serving request: ${what}`, {
    hint: 'run the same tandem version on the coordinator and the nodes',
  });
}

const NEEDS: readonly string[] = ['logits', 'argmax', 'none'] satisfies LogitsNeed[];

/** A request's `needs` for its n answered rows: absent, all 'logits'. */
function needsOf(v: unknown, n: number): LogitsNeed[] {
  if (v === undefined) return new Array<LogitsNeed>(n).fill('logits');
  if (!Array.isArray(v) || v.length !== n || !v.every((x) => NEEDS.includes(x as string)))
    throw bad(`needs (${n} of 'logits', 'argmax', 'none')`);
  return v as LogitsNeed[];
}

function ids(v: unknown, what: string, max: number): number[] {
  if (!Array.isArray(v) || !v.every((x) => Number.isInteger(x) && x >= 0 && x <= max)) throw bad(what);
  return v as number[];
}

/** A step's `keep` (absent: none): distinct sequences the step carries, none of them reset. */
function keepOf(v: unknown, carried: readonly number[], reset: readonly number[]): [number, number][] {
  if (v === undefined) return [];
  const isPair = (x: unknown): x is [number, number] =>
    Array.isArray(x) &&
    x.length === 2 &&
    x.every((n) => Number.isInteger(n) && (n as number) >= 0 && (n as number) <= 2 ** 31);
  if (!Array.isArray(v) || !v.every(isPair)) throw bad('keep ([sequence id, positions] pairs)');
  const seqs = v.map(([id]) => id);
  if (new Set(seqs).size !== seqs.length || !seqs.every((id) => carried.includes(id) && !reset.includes(id)))
    throw bad('keep names a sequence twice, one the step does not carry, or one it resets');
  return v;
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
  const keep = keepOf(m.keep, seqs, reset);
  return { seqs, tokens, single, reset, keep, needs: needsOf(m.needs, single ? 1 : seqs.length) };
}

/**
 * A `forward-mixed` step: a prompt piece of one sequence and one decode token of each of
 * others, which every node runs in one forward (forwardMixedOnRank). On the wire:
 * `{ prefill: { seq, tokens }, decode: { seqs, tokens }, reset, keep, onePass }`.
 */
export interface MixedRequest {
  prefill: { seq: number; tokens: number[] };
  /** One token per sequence, tokens[t] at the next position of seqs[t]; none of them the prefill's. */
  decode: { seqs: number[]; tokens: number[] };
  reset: number[];
  keep: [number, number][];
  /** Every rank of the placement runs the two in one pass (runsMixedInOnePass); false: the piece, then the rows. */
  onePass: boolean;
  /** The piece's row, then each decode row. */
  needs: LogitsNeed[];
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
  const keep = keepOf(m.keep, [prefill.seq, ...decode.seqs], reset);
  return {
    prefill,
    decode,
    reset,
    keep,
    onePass: m.onePass,
    needs: needsOf(m.needs, 1 + decode.seqs.length),
  };
}

/** The logits rank's answer to a step: each row as its need asks. */
export function encodeRows(rows: readonly Float32Array[], needs: readonly LogitsNeed[]): Message {
  const whole: Float32Array[] = [];
  const argmax: (number | null)[] = [];
  for (const [t, row] of rows.entries()) {
    if (needs[t] === 'logits') whole.push(row);
    if (needs[t] !== 'argmax') continue;
    const token = pickOrNull(row);
    argmax.push(token);
    if (token === null) whole.push(row);
  }
  return {
    logits: Buffer.concat(whole.map((r) => Buffer.from(r.buffer, r.byteOffset, r.byteLength))).toString(
      'base64',
    ),
    argmax,
  };
}

/** greedyPick's token, or null where it refuses the row (SAMPLER_LOGITS). */
function pickOrNull(row: Float32Array): number | null {
  try {
    return greedyPick(row);
  } catch (error) {
    if (isTandemError(error, 'SAMPLER_LOGITS')) return null;
    throw error;
  }
}

/**
 * The rows of encodeRows' answer, in row order: logits (an 'argmax' row that could not be
 * picked among them), token ids, or undefined for 'none'.
 */
export function decodeRows(answer: Message, needs: readonly LogitsNeed[], vocab: number): RowResult[] {
  const argmaxRows = needs.filter((x) => x === 'argmax').length;
  const picks = answer.argmax ?? [];
  if (!Array.isArray(picks) || picks.length !== argmaxRows)
    throw bad(
      `${Array.isArray(picks) ? picks.length : 'no'} argmax answer(s) for the step's ${argmaxRows} argmax row(s)`,
    );
  if (!picks.every((x) => x === null || (Number.isInteger(x) && x >= 0 && x < vocab)))
    throw bad(`argmax (ids below ${vocab}, or null)`);
  const n = needs.filter((x) => x === 'logits').length + picks.filter((x) => x === null).length;
  const bytes = typeof answer.logits === 'string' ? Buffer.from(answer.logits, 'base64') : Buffer.alloc(0);
  if (bytes.byteLength !== n * vocab * 4)
    throw bad(`logits of ${bytes.byteLength} bytes for ${n} row(s) of ${vocab}`);
  const all = new Float32Array(n * vocab);
  new Uint8Array(all.buffer).set(bytes);
  let whole = 0;
  let pick = 0;
  const next = (): Float32Array => all.subarray(whole * vocab, ++whole * vocab);
  return needs.map((need) => {
    if (need === 'none') return undefined;
    if (need === 'logits') return next();
    const token = picks[pick++] as number | null;
    return token === null ? next() : token;
  });
}
