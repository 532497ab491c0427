import assert from 'node:assert/strict';
import {
  fromNumbers,
  toNumbers,
  writeElement,
  allocate,
  type DType,
  type DTypeArray,
} from '../kernels/dtype.js';
import type { Algorithm } from './call.js';
import { chunkRanges } from './chunks.js';
import type { Communicator } from './communicator.js';

/**
 * Shared cases for every provider: inputs known on every rank, expected values computed
 * independently in float64 (then rounded once to the dtype), and checks that every rank
 * ends bit-identical. Used in-process (loopback) and by the multi-process worker.
 */

export const matrixCounts = [0, 1, 7, 4096, 1_000_003] as const;
export type ReduceName = 'sum' | 'max' | 'min' | 'mean';

/** Small integers in [-8, 8]: sums over 8 ranks stay exact in every dtype, so results compare exactly. */
export function inputValue(rank: number, i: number): number {
  return ((i * 7 + rank * 13 + ((i >> 5) & 3)) % 17) - 8;
}

export function inputFor(dtype: DType, rank: number, count: number, seedShift = 0): DTypeArray {
  const out = allocate(dtype, count);
  for (let i = 0; i < count; i++) writeElement(dtype, out, i, inputValue(rank + seedShift, i));
  return out;
}

/** The all-reduce result of element i, computed directly from the inputs in float64. */
export function expectedReduce(op: ReduceName, dtype: DType, size: number, i: number, seedShift = 0): number {
  let acc = op === 'max' ? -Infinity : op === 'min' ? Infinity : 0;
  for (let r = 0; r < size; r++) {
    const v = inputValue(r + seedShift, i);
    acc = op === 'max' ? Math.max(acc, v) : op === 'min' ? Math.min(acc, v) : acc + v;
  }
  if (op === 'mean') acc = dtype === 'i32' ? Math.trunc(acc / size) : acc / size;
  return toNumbers(dtype, fromNumbers(dtype, [acc]))[0] as number;
}

export function assertReduced(
  results: readonly DTypeArray[],
  op: ReduceName,
  dtype: DType,
  size: number,
  what: string,
  seedShift = 0,
): void {
  const first = toNumbers(dtype, results[0] as DTypeArray);
  for (let i = 0; i < first.length; i++) {
    const want = expectedReduce(op, dtype, size, i, seedShift);
    if (first[i] !== want) assert.fail(`${what}: element ${i} is ${first[i]}, expected ${want}`);
  }
  assertIdentical(results, what);
}

/** Every rank holds the same bits. */
export function assertIdentical(results: readonly DTypeArray[], what: string): void {
  const ref = Buffer.from(
    (results[0] as DTypeArray).buffer,
    (results[0] as DTypeArray).byteOffset,
    (results[0] as DTypeArray).byteLength,
  );
  results.forEach((r, rank) => {
    assert.ok(
      ref.equals(Buffer.from(r.buffer, r.byteOffset, r.byteLength)),
      `${what}: rank ${rank} differs from rank 0`,
    );
  });
}

export async function runAllReduce(
  comms: readonly Communicator[],
  dtype: DType,
  count: number,
  op: ReduceName,
  algorithm: Algorithm | undefined,
): Promise<DTypeArray[]> {
  return Promise.all(
    comms.map(async (c) => {
      const data = inputFor(dtype, c.rank, count);
      await c.allReduce(data, { op, dtype, ...(algorithm ? { algorithm } : {}) });
      return data;
    }),
  );
}

export async function checkAllGather(
  comms: readonly Communicator[],
  dtype: DType,
  count: number,
  algorithm: Algorithm | undefined,
  what: string,
): Promise<void> {
  const outs = await Promise.all(
    comms.map((c) =>
      c.allGather(inputFor(dtype, c.rank, count), { dtype, ...(algorithm ? { algorithm } : {}) }),
    ),
  );
  const got = toNumbers(dtype, outs[0] as DTypeArray);
  for (let r = 0; r < comms.length; r++) {
    for (let i = 0; i < count; i++) {
      const want = inputValue(r, i);
      if (got[r * count + i] !== want)
        assert.fail(`${what}: block ${r} element ${i} is ${got[r * count + i]}, expected ${want}`);
    }
  }
  assertIdentical(outs, what);
}

export async function checkReduceScatter(
  comms: readonly Communicator[],
  dtype: DType,
  count: number,
  op: ReduceName,
  algorithm: Algorithm | undefined,
  what: string,
): Promise<void> {
  const n = comms.length;
  const chunks = chunkRanges(count, n);
  const outs = await Promise.all(
    comms.map((c) =>
      c.reduceScatter(inputFor(dtype, c.rank, count), { op, dtype, ...(algorithm ? { algorithm } : {}) }),
    ),
  );
  outs.forEach((out, r) => {
    const range = chunks[r] as (typeof chunks)[number];
    assert.equal(out.length, range.count, `${what}: rank ${r} chunk length`);
    const got = toNumbers(dtype, out);
    for (let i = 0; i < range.count; i++) {
      const want = expectedReduce(op, dtype, n, range.offset + i);
      if (got[i] !== want)
        assert.fail(`${what}: rank ${r} element ${range.offset + i} is ${got[i]}, expected ${want}`);
    }
  });
}

export async function checkBroadcast(
  comms: readonly Communicator[],
  dtype: DType,
  count: number,
  root: number,
  algorithm: Algorithm | undefined,
  what: string,
): Promise<void> {
  const outs = await Promise.all(
    comms.map(async (c) => {
      const data = c.rank === root ? inputFor(dtype, root, count) : allocate(dtype, count);
      await c.broadcast(data, root, { dtype, ...(algorithm ? { algorithm } : {}) });
      return data;
    }),
  );
  const got = toNumbers(dtype, outs[0] as DTypeArray);
  for (let i = 0; i < count; i++)
    if (got[i] !== inputValue(root, i))
      assert.fail(`${what}: element ${i} is ${got[i]}, expected ${inputValue(root, i)}`);
  assertIdentical(outs, what);
}

/** Rank r sends (r + j) % 3 * k values to rank j, each value encoding (from, to, index). */
export async function checkAllToAll(
  comms: readonly Communicator[],
  k: number,
  giveRecvCounts: boolean,
  what: string,
): Promise<void> {
  const n = comms.length;
  const cnt = (from: number, to: number): number => ((from + to) % 3) * k;
  const value = (from: number, to: number, i: number): number => from * 1_000_000 + to * 10_000 + i;
  const outs = await Promise.all(
    comms.map((c) => {
      const counts = Array.from({ length: n }, (_, j) => cnt(c.rank, j));
      const send = new Int32Array(counts.reduce((a, b) => a + b, 0));
      let at = 0;
      for (let j = 0; j < n; j++) for (let i = 0; i < cnt(c.rank, j); i++) send[at++] = value(c.rank, j, i);
      const recvCounts = Array.from({ length: n }, (_, j) => cnt(j, c.rank));
      return c.allToAll(send, counts, giveRecvCounts ? recvCounts : undefined);
    }),
  );
  outs.forEach((out, me) => {
    const want: number[] = [];
    for (let j = 0; j < n; j++) for (let i = 0; i < cnt(j, me); i++) want.push(value(j, me, i));
    assert.deepEqual([...out], want, `${what}: rank ${me}`);
  });
}
