import { bytesOf, bytesPerElement, type DTypeArray } from '../kernels/dtype.js';
import { chunkRanges, splitRange, type Range } from './chunks.js';
import { sub, type Call } from './call.js';

/**
 * At most this many segments per half (the header's step field is 16 bits and each segment
 * is a receive posted ahead); past it segments span several fragments.
 */
export const PAIR_SEGMENTS_MAX = 1024;

/**
 * Segments per half for a 2-rank ring all-reduce of `count` values of `bytesPerValue` bytes:
 * one per fragment, so the pipelined ring sends exactly the messages the plain ring sends
 * fragments (each message costs its own socket calls, ACK request and credits); 0 when a half
 * is a single fragment (nothing to overlap: the plain ring runs).
 */
export function pairSegments(count: number, bytesPerValue: number, fragmentBytes: number): number {
  const segs = Math.ceil((Math.floor(count / 2) * bytesPerValue) / fragmentBytes);
  return segs >= 2 ? Math.min(PAIR_SEGMENTS_MAX, segs) : 0;
}

/** A receive posted ahead of its turn: its rejection (an abort) is seen when awaited, not as unhandled. */
function early<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/**
 * The 2-rank ring all-reduce, pipelined (raw wire only). Each rank keeps the half of its rank
 * (chunkRanges(count, 2)[rank]) and gives the peer's, as the ring does; both halves are cut
 * into `segs` segments. Every reduce-scatter segment goes out at once (steps 0..segs-1); the
 * peer's segment k is reduced into the kept half as it arrives and sent back at once (step
 * segs + k), so the all-gather of segment k travels while segment k+1 of the reduce-scatter
 * is still arriving, and both directions of the connection carry data at the same time.
 *
 * Each element is reduced once, by the rank that keeps its half, as `kept (op) received`,
 * the ring's order: the bits equal the unpipelined ring's. A received all-gather segment k
 * overwrites given segment k only after the peer reduced it, so after this rank's send of it
 * was written out.
 */
export async function allReduceRingPair(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
  segs: number,
): Promise<void> {
  const p = order.indexOf(call.rank);
  const peer = order[1 - p] as number;
  const halves = chunkRanges(data.length, 2);
  const keep = splitRange(halves[call.rank] as Range, segs);
  const give = splitRange(halves[peer] as Range, segs);
  const reduced = keep.map((r, k) => early(call.recvReduce(peer, sub(data, r), 0, k)));
  const gathered = give.map((r, k) => early(call.recvCopy(peer, sub(data, r), 0, segs + k)));
  const sends = give.map((r, k) => call.send(peer, bytesOf(sub(data, r)), 0, k));
  for (let k = 0; k < segs; k++) {
    await call.drive(reduced[k] as Promise<void>);
    sends.push(call.send(peer, bytesOf(sub(data, keep[k] as Range)), 0, segs + k));
  }
  await call.driveAll(gathered);
  await call.driveAll(sends);
}

/** Segments for `call` on `data` (see pairSegments). */
export function pairSegmentsOf(call: Call, data: DTypeArray): number {
  return pairSegments(data.length, bytesPerElement(call.spec.dtype), call.comm.router.fragmentBytes);
}
