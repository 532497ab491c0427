import { TandemError } from '../errors/index.js';
import type { DType, DTypeArray } from '../kernels/dtype.js';
import type { ReduceOp } from '../kernels/reduce.js';
import { algorithms, type Algorithm } from './call.js';
import type { CollectiveOp } from './header.js';
import { chooseAlgorithm, type TopologyFacts } from './select.js';

/* The arguments of a collective call, checked before anything is sent. */

export interface CallOptions {
  /** Override the automatic choice. */
  algorithm?: Algorithm;
  /** Needed for Uint16Array data: f16 or bf16. */
  dtype?: DType;
}

export interface AllReduceOptions extends CallOptions {
  op?: ReduceOp | 'mean';
  /** `q8`: f32 values travel as int8 with one scale per 32 (sum and mean only). */
  wire?: 'raw' | 'q8';
}

export const badArg = (message: string, hint: string): TandemError =>
  new TandemError('COLL_BAD_ARGUMENT', message, { hint });

/** The dtype of a call's data: its array type's, or for a Uint16Array the one the options name. */
export function dataDType(data: DTypeArray, o: CallOptions): DType {
  if (data instanceof Float32Array) return check(o.dtype, 'f32');
  if (data instanceof Int32Array) return check(o.dtype, 'i32');
  if (o.dtype === 'f16' || o.dtype === 'bf16') return o.dtype;
  throw badArg(
    `a Uint16Array needs dtype 'f16' or 'bf16', got ${String(o.dtype)}`,
    'pass { dtype: "f16" } or { dtype: "bf16" }',
  );
  function check(given: DType | undefined, actual: DType): DType {
    if (given !== undefined && given !== actual)
      throw badArg(
        `dtype '${given}' given for ${actual} data`,
        `pass ${actual} data or drop the dtype option`,
      );
    return actual;
  }
}

/** The algorithm of a call on a world of `size`: the one the options force (checked), else the choice for the topology. */
export function pickAlgorithm(
  size: number,
  facts: TopologyFacts,
  op: CollectiveOp,
  bytes: number,
  o: CallOptions,
  q8: boolean,
): Algorithm {
  if (o.algorithm !== undefined) {
    if (!algorithms.includes(o.algorithm))
      throw badArg(`unknown algorithm '${String(o.algorithm)}'`, `use one of ${algorithms.join(', ')}`);
    if (q8 && o.algorithm === 'rhd')
      throw badArg(
        'q8 wire format works with mesh, ring and tree, not rhd',
        'use algorithm mesh, ring or tree, or drop wire: q8',
      );
    return size === 1 ? 'mesh' : o.algorithm;
  }
  return chooseAlgorithm(op, bytes, facts, q8);
}

/** Counts travel as u32 in every frame header. */
export function checkCount(count: number): void {
  if (count > 0xffffffff) throw badArg(`count ${count} exceeds 2^32 - 1 elements`, 'split the call');
}

/** All-to-all counts: one non-negative integer per rank, summing to `total` when given (the send side). */
export function checkCounts(
  name: 'sendCounts' | 'recvCounts',
  counts: readonly number[],
  size: number,
  total?: number,
): void {
  const valid = counts.length === size && counts.every((x) => Number.isInteger(x) && x >= 0);
  if (!valid || (total !== undefined && counts.reduce((a, b) => a + b, 0) !== total))
    throw badArg(
      `all-to-all ${name} [${counts.join(', ')}] must be ${size} non-negative integers${total !== undefined ? ` summing to ${total}` : ''}`,
      total !== undefined
        ? 'give one count per rank; their sum is the send array length'
        : 'give one count per rank',
    );
}

/** A point-to-point peer: another rank of the world. */
export function checkPeer(peer: number, rank: number, size: number): void {
  if (!Number.isInteger(peer) || peer < 0 || peer >= size || peer === rank)
    throw badArg(
      `peer ${peer} is not another rank of 0..${size - 1} (this is rank ${rank})`,
      'pass the rank of another member',
    );
}

/** A broadcast root: a rank of the world. */
export function checkRoot(root: number, size: number): void {
  if (!Number.isInteger(root) || root < 0 || root >= size)
    throw badArg(
      `broadcast root ${root} is not a rank of 0..${size - 1}`,
      'pass a rank of this communicator',
    );
}

/** An all-reduce's checked options (a typed error for bad ones) and algorithm, on a world of `size`. */
export function allReduceArgs(
  data: DTypeArray,
  options: AllReduceOptions,
  size: number,
  facts: TopologyFacts,
): { dtype: DType; reduce: ReduceOp | 'mean'; q8: boolean; algorithm: Algorithm } {
  const dtype = dataDType(data, options);
  const reduce = options.op ?? 'sum';
  if (reduce !== 'sum' && reduce !== 'max' && reduce !== 'min' && reduce !== 'mean')
    throw badArg(`unknown reduce op '${String(reduce)}'`, 'use sum, max, min or mean');
  const q8 = options.wire === 'q8';
  if (q8 && (dtype !== 'f32' || (reduce !== 'sum' && reduce !== 'mean')))
    throw badArg(
      `q8 wire format needs f32 data and op sum or mean, got ${dtype} ${reduce}`,
      'drop wire: q8 for this call',
    );
  checkCount(data.length);
  return {
    dtype,
    reduce,
    q8,
    algorithm: pickAlgorithm(size, facts, 'all-reduce', data.byteLength, options, q8),
  };
}
