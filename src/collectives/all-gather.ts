import type { DTypeArray } from '../kernels/dtype.js';
import { laneChunks, ringAllGatherLane, ringLanes } from './all-reduce.js';
import { chunkRanges, type Range } from './chunks.js';
import { sub, WHOLE_MAX, type Call } from './call.js';
import type { Tree } from '../topology/routing.js';
import { pairwiseSteps } from './schedules.js';

/**
 * All-gather: every rank contributes `count` values; `out` ([size * count]) ends holding
 * rank r's values at [r * count, (r + 1) * count) on every rank.
 */

function blocks(size: number, count: number): Range[] {
  return Array.from({ length: size }, (_, r) => ({ offset: r * count, count }));
}

export async function allGatherMesh(call: Call, out: DTypeArray, count: number): Promise<void> {
  const mine = call.encode(sub(out, { offset: call.rank * count, count }));
  const steps = pairwiseSteps(call.size, call.rank);
  const sent = steps.map((s) => call.send(s.to, mine));
  const bytes = call.wireBytes(count);
  if (bytes <= WHOLE_MAX) {
    // small: as the mesh all-reduce, poll until every block is in, then take them whole
    const from = new Array<Uint8Array | undefined>(call.size);
    await call.takeAll(steps, bytes, from);
    for (const s of steps) {
      const payload = from[s.from] as Uint8Array;
      call.copyFrom(sub(out, { offset: s.from * count, count }), payload);
      call.release(payload);
    }
  } else
    await call.driveAll(steps.map((s) => call.recvCopy(s.from, sub(out, { offset: s.from * count, count }))));
  await call.driveAll(sent);
}

export async function allGatherRing(
  call: Call,
  out: DTypeArray,
  count: number,
  order: readonly number[],
): Promise<void> {
  const b = blocks(call.size, count);
  const lanes = ringLanes(order, count * call.size, 1, call.comm.wires);
  await Promise.all(
    lanes.map((o, lane) =>
      ringAllGatherLane(
        call,
        out,
        o,
        laneChunks(b, o, lanes.length, lane, 1),
        lane,
        0,
        undefined,
        lanes.length === 1,
      ),
    ),
  );
}

/** Recursive doubling; needs a power-of-two size (the communicator falls back to ring otherwise). */
export async function allGatherRhd(call: Call, out: DTypeArray, count: number): Promise<void> {
  const r = call.rank;
  for (let d = 1, step = 0; d < call.size; d *= 2, step++) {
    const partner = r ^ d;
    const mine = { offset: (r & ~(d - 1)) * count, count: d * count };
    const theirs = { offset: (partner & ~(d - 1)) * count, count: d * count };
    const sent = call.send(partner, call.encode(sub(out, mine)), 0, step);
    await call.drive(call.recvCopy(partner, sub(out, theirs), 0, step));
    await call.drive(sent);
  }
}

function subtree(tree: Tree, v: number): number[] {
  const out = [v];
  for (let i = 0; i < out.length; i++) out.push(...(tree.children[out[i] as number] ?? []));
  return out.sort((a, b) => a - b);
}

/** Gather up a spanning tree (each node forwards its subtree's blocks, ascending), broadcast down. */
export async function allGatherTree(call: Call, out: DTypeArray, count: number, tree: Tree): Promise<void> {
  const me = call.rank;
  for (const child of tree.children[me] ?? []) {
    const ranks = subtree(tree, child);
    const payload = await call.drive(call.recv(child, call.wireBytes(count) * ranks.length, 0, 0));
    const per = call.wireBytes(count);
    ranks.forEach((r, i) =>
      call.copyFrom(sub(out, { offset: r * count, count }), payload.subarray(i * per, (i + 1) * per)),
    );
  }
  const parent = tree.parent[me] as number;
  if (parent >= 0) {
    const ranks = subtree(tree, me);
    const per = call.wireBytes(count);
    const packed = new Uint8Array(per * ranks.length);
    ranks.forEach((r, i) => packed.set(call.encode(sub(out, { offset: r * count, count })), i * per));
    await call.drive(call.send(parent, packed, 0, 0));
    await call.drive(call.recvCopy(parent, out, 0, 1));
  }
  const all = call.encode(out);
  await call.driveAll((tree.children[me] ?? []).map((c) => call.send(c, all, 0, 1)));
}

export { chunkRanges };
