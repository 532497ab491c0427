import type { DTypeArray } from '../kernels/dtype.js';
import { chunkRanges } from './chunks.js';
import { sub, type Call } from './call.js';
import type { Tree } from '../topology/routing.js';

/** Broadcast: `data` on `root` is copied into `data` on every rank. */

export async function broadcastMesh(call: Call, data: DTypeArray, root: number): Promise<void> {
  if (call.rank !== root) {
    await call.drive(call.recvCopy(root, data));
    return;
  }
  const wire = call.encode(data);
  const sends: Promise<void>[] = [];
  for (let i = 1; i < call.size; i++) sends.push(call.send((root + i) % call.size, wire));
  await call.driveAll(sends);
}

/** Down a spanning tree rooted at `root` (binomial on a full mesh, BFS over real links otherwise). */
export async function broadcastTree(call: Call, data: DTypeArray, tree: Tree): Promise<void> {
  const parent = tree.parent[call.rank] as number;
  if (parent >= 0) await call.drive(call.recvCopy(parent, data));
  const wire = call.encode(data);
  await call.driveAll((tree.children[call.rank] ?? []).map((c) => call.send(c, wire)));
}

/** A pipelined chain along the ring from the root: segments flow while later ones arrive. */
export async function broadcastRing(
  call: Call,
  data: DTypeArray,
  root: number,
  order: readonly number[],
  segmentElems: number,
): Promise<void> {
  const n = order.length;
  const shift = order.indexOf(root);
  const p = (order.indexOf(call.rank) - shift + n) % n;
  const prev = order[(p - 1 + shift + n) % n] as number;
  const next = order[(p + 1 + shift) % n] as number;
  const segments = chunkRanges(data.length, Math.max(1, Math.ceil(data.length / segmentElems)));
  const sends: Promise<void>[] = [];
  for (let s = 0; s < segments.length; s++) {
    const seg = segments[s] as (typeof segments)[number];
    if (p > 0) await call.drive(call.recvCopy(prev, sub(data, seg), 0, s));
    if (p < n - 1) sends.push(call.send(next, call.encode(sub(data, seg)), 0, s));
  }
  await call.driveAll(sends);
}
