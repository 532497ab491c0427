import { bytesPerElement, type DTypeArray } from '../kernels/dtype.js';
import { q8BlockSize } from '../kernels/q8.js';
import { reduceFast as reduceInto } from '../kernels/reduce-native.js';
import { chunkRanges, splitRange, type Range } from './chunks.js';
import { span, sub, WHOLE_MAX, type Call } from './call.js';
import { SENT } from './router/index.js';
import type { Tree } from '../topology/routing.js';
import { pairwiseSteps, rhdPlan, ringAllGatherSteps, ringReduceScatterSteps } from './schedules.js';

/**
 * All-reduce algorithms. Each leaves bit-identical results on every rank: either every rank
 * folds the same operands in rank order (mesh), or one rank reduces each element in a fixed
 * order and the result is copied to the others (ring, rhd, tree).
 */

/** mesh: one step, everyone sends its whole vector to everyone; everyone folds ranks 0..n-1. */
export async function allReduceMesh(call: Call, data: DTypeArray): Promise<void> {
  const { rank, size } = call;
  const mine = call.settle(data);
  const bytes = call.wireBytes(data.length);
  const steps = pairwiseSteps(size, rank);
  let sent: Promise<void>[] | undefined; // sends still in progress (a small one is copied out at once)
  for (const s of steps) {
    const p = call.send(s.to, mine);
    if (p !== SENT) (sent ??= []).push(p);
  }
  // contributions by rank; this rank's own stays undefined
  const parts = new Array<DTypeArray | undefined>(size);
  const from = new Array<Uint8Array | undefined>(size);
  if (call.spec.q8 || bytes <= WHOLE_MAX) {
    // small: drive progress here until every part is in, then take them whole
    const rest = call.takeAll(steps, bytes, from);
    if (rest) await rest;
  } else {
    // large: each part streams from the receive slots into a kept scratch array, whose pages
    // are faulted in once; a fresh buffer per message would take page faults on every call
    // (docs/collectives.md, "Measured facts behind the constants")
    await call.driveAll(
      steps.map((s) =>
        call.recvCopy(s.from, (parts[s.from] = call.comm.scratch(call.spec.dtype, data.length, 1 + s.from))),
      ),
    );
  }
  if (sent) await call.driveAll(sent);
  const acc = call.comm.scratch(call.spec.dtype, data.length, 0);
  for (let r = 0; r < size; r++) {
    const part = parts[r];
    const payload = from[r];
    if (r === 0) {
      if (part) acc.set(part);
      else if (payload) call.copyFrom(acc, payload);
      else acc.set(data);
    } else if (part) reduceInto(call.op, call.spec.dtype, acc, part);
    else if (payload) call.reduceFrom(acc, payload);
    else reduceInto(call.op, call.spec.dtype, acc, data);
  }
  for (const s of steps) {
    const payload = from[s.from];
    if (payload) call.release(payload);
  }
  data.set(acc);
}

/**
 * The lanes of a ring: with 3+ ranks half the lanes run along `order` and half the other way
 * round; each direction is striped over `wires` connections. Lane l runs in direction
 * floor(l / wires) on wire l % wires (the router picks the wire from the lane).
 */
export function ringLanes(order: readonly number[], count: number, align: number, wires = 1): number[][] {
  const n = order.length;
  const dirs = n >= 3 ? [[...order], [order[0] as number, ...order.slice(1).reverse()]] : [[...order]];
  let w = Math.max(1, wires);
  while (w > 1 && count < dirs.length * w * n * align) w--;
  if (count < dirs.length * n * align) return [[...order]];
  const lanes: number[][] = [];
  for (const d of dirs) for (let i = 0; i < w; i++) lanes.push(d);
  return lanes;
}

/** Chunk of each ring position of `lane`: position k owns the data chunk of rank order[k]. */
function laneChunks(
  chunks: readonly Range[],
  order: readonly number[],
  lanes: number,
  lane: number,
  align: number,
): Range[] {
  return order.map((r) => splitRange(chunks[r] as Range, lanes, align)[lane] as Range);
}

/** A receive posted ahead of its turn: its rejection (an abort) is seen when awaited, not as unhandled. */
function early<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/**
 * The receives of a ring reduce-scatter lane, posted at once: fragments that arrive before
 * their step is reached stream straight into their sinks instead of waiting in a copy.
 * (Safe: a step's chunk is never the one being sent, and the mailbox serves steps in order.)
 */
export function prepostReduceScatter(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
  chunks: readonly Range[],
  lane: number,
): Promise<void>[] {
  const n = order.length;
  const p = order.indexOf(call.rank);
  const prev = order[(p - 1 + n) % n] as number;
  return ringReduceScatterSteps(n, p).map((st, s) =>
    early(call.recvReduce(prev, sub(data, chunks[st.recv] as Range), lane, s)),
  );
}

/** The receives of a ring all-gather lane, posted at once (raw wire only; q8 forwards whole payloads). */
export function prepostAllGather(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
  chunks: readonly Range[],
  lane: number,
  stepBase: number,
): Promise<void>[] | undefined {
  if (call.spec.q8) return undefined;
  const n = order.length;
  const p = order.indexOf(call.rank);
  const prev = order[(p - 1 + n) % n] as number;
  return ringAllGatherSteps(n, p).map((st, s) =>
    early(call.recvCopy(prev, sub(data, chunks[st.recv] as Range), lane, stepBase + s)),
  );
}

/** Ring reduce-scatter on one lane: afterwards this rank holds its chunk fully reduced. */
export async function ringReduceScatterLane(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
  chunks: readonly Range[],
  lane: number,
  pre?: Promise<void>[],
  drive = false,
): Promise<void> {
  const n = order.length;
  const p = order.indexOf(call.rank);
  const next = order[(p + 1) % n] as number;
  const recvs = pre ?? prepostReduceScatter(call, data, order, chunks, lane);
  const steps = ringReduceScatterSteps(n, p);
  for (let s = 0; s < steps.length; s++) {
    const st = steps[s] as (typeof steps)[number];
    const out = call.send(next, call.encode(sub(data, chunks[st.send] as Range)), lane, s);
    const got = recvs[s] as Promise<void>;
    await (drive ? call.drive(got) : got);
    await (drive ? call.drive(out) : out);
  }
}

/** Ring all-gather on one lane: forwards what arrived, so q8 payloads travel unchanged. */
export async function ringAllGatherLane(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
  chunks: readonly Range[],
  lane: number,
  stepBase: number,
  pre?: Promise<void>[],
  drive = false,
): Promise<void> {
  const n = order.length;
  const p = order.indexOf(call.rank);
  const next = order[(p + 1) % n] as number;
  const prev = order[(p - 1 + n) % n] as number;
  const recvs = pre ?? prepostAllGather(call, data, order, chunks, lane, stepBase);
  let carry = call.settle(sub(data, chunks[p] as Range));
  const steps = ringAllGatherSteps(n, p);
  for (let s = 0; s < steps.length; s++) {
    const st = steps[s] as (typeof steps)[number];
    const out = call.send(next, carry, lane, stepBase + s);
    const into = sub(data, chunks[st.recv] as Range);
    if (recvs === undefined) {
      // q8: forward the received packing unchanged: re-quantising decoded values could differ
      const got = call.recv(prev, call.wireBytes(into.length), lane, stepBase + s);
      const payload = await (drive ? call.drive(got) : got);
      call.copyFrom(into, payload);
      carry = payload;
    } else {
      const got = recvs[s] as Promise<void>;
      await (drive ? call.drive(got) : got);
      carry = call.encode(into);
    }
    await (drive ? call.drive(out) : out);
  }
}

/** ring: reduce-scatter then all-gather, in both directions when the ring has 3+ ranks. */
export async function allReduceRing(call: Call, data: DTypeArray, order: readonly number[]): Promise<void> {
  const align = call.spec.q8 ? q8BlockSize : 1;
  const chunks = chunkRanges(data.length, call.size, align);
  const lanes = ringLanes(order, data.length, align, call.comm.wires);
  // a lone lane drives progress itself while it waits; concurrent lanes leave it to the pump
  // (one spinning would hold back the others' next sends, and the peers' lanes wait for them)
  const drive = lanes.length === 1;
  await Promise.all(
    lanes.map(async (o, lane) => {
      const mine = laneChunks(chunks, o, lanes.length, lane, align);
      const rs = prepostReduceScatter(call, data, o, mine, lane);
      const ag = prepostAllGather(call, data, o, mine, lane, call.size);
      await ringReduceScatterLane(call, data, o, mine, lane, rs, drive);
      await ringAllGatherLane(call, data, o, mine, lane, call.size, ag, drive);
    }),
  );
}

export { laneChunks };

/** rhd: recursive halving (reduce-scatter) then recursive doubling (all-gather); any size. */
export async function allReduceRhd(call: Call, data: DTypeArray): Promise<void> {
  const plan = rhdPlan(call.size, call.rank);
  if (plan.role === 'extra') {
    await call.drive(call.send(plan.foldPartner, call.encode(data), 0, 0));
    await call.drive(call.recvCopy(plan.foldPartner, data, 0, 1000));
    return;
  }
  if (plan.role === 'folded') await call.drive(call.recvReduce(plan.foldPartner, data, 0, 0));
  const chunks = chunkRanges(data.length, plan.p);
  for (let i = 0; i < plan.steps.length; i++) {
    const st = plan.steps[i] as (typeof plan.steps)[number];
    const give = span(chunks, st.give[0], st.give[1]);
    const keep = span(chunks, st.keep[0], st.keep[1]);
    const out = call.send(st.partner, call.encode(sub(data, give)), 0, 1 + i);
    await call.drive(call.recvReduce(st.partner, sub(data, keep), 0, 1 + i));
    await call.drive(out);
  }
  for (let i = plan.steps.length - 1; i >= 0; i--) {
    const st = plan.steps[i] as (typeof plan.steps)[number];
    const give = span(chunks, st.give[0], st.give[1]);
    const keep = span(chunks, st.keep[0], st.keep[1]);
    const out = call.send(st.partner, call.encode(sub(data, keep)), 0, 100 + i);
    await call.drive(call.recvCopy(st.partner, sub(data, give), 0, 100 + i));
    await call.drive(out);
  }
  if (plan.role === 'folded') await call.drive(call.send(plan.foldPartner, call.encode(data), 0, 1000));
}

/**
 * tree: reduce up a spanning tree (children in fixed order), then broadcast down; pipelined
 * in up to 8 segments: segment k goes up (step 2k) while earlier segments come down (step
 * 2k+1), so a deep tree (a line) costs about one message time plus depth segment times
 * instead of depth message times. Each element is still reduced in the same fixed order.
 */
export async function allReduceTree(call: Call, data: DTypeArray, tree: Tree): Promise<void> {
  if (call.spec.q8) return allReduceTreeQ8(call, data, tree);
  const me = call.rank;
  const kids = tree.children[me] ?? [];
  const parent = tree.parent[me] as number;
  const segs = treeSegments(call, data.length);
  const sends: Promise<void>[] = [];
  const down = (k: number, seg: DTypeArray): void => {
    const wire = call.encode(seg);
    for (const c of kids) sends.push(call.send(c, wire, 0, 2 * k + 1));
  };
  // Posted ahead (so segments stream into their sinks): the first child's contributions and
  // the parent's results. Later children's receives wait for the first one of their segment,
  // which keeps every element's reduction order fixed.
  const first = kids[0];
  const firstUp =
    first === undefined ? [] : segs.map((r, k) => early(call.recvReduce(first, sub(data, r), 0, 2 * k)));
  const fromParent =
    parent < 0 ? [] : segs.map((r, k) => early(call.recvCopy(parent, sub(data, r), 0, 2 * k + 1)));
  const up = async (): Promise<void> => {
    for (let k = 0; k < segs.length; k++) {
      const seg = sub(data, segs[k] as Range);
      await firstUp[k];
      for (let i = 1; i < kids.length; i++) await call.recvReduce(kids[i] as number, seg, 0, 2 * k);
      if (parent >= 0) sends.push(call.send(parent, call.encode(seg), 0, 2 * k));
      else down(k, seg); // the root turns each segment around at once
    }
  };
  const relay = async (): Promise<void> => {
    for (let k = 0; k < segs.length; k++) {
      await fromParent[k];
      down(k, sub(data, segs[k] as Range));
    }
  };
  await Promise.all(parent >= 0 ? [up(), relay()] : [up()]);
  await Promise.all(sends);
}

/**
 * At most TREE_SEGMENTS segments of at least one fragment each: enough to overlap the hops
 * (a depth-d tree then costs about (1 + d / 8) message times), few enough that per-message
 * costs stay small.
 */
function treeSegments(call: Call, count: number): Range[] {
  const perFragment = Math.max(
    1,
    Math.floor(call.comm.router.fragmentBytes / bytesPerElement(call.spec.dtype)),
  );
  return chunkRanges(count, Math.max(1, Math.min(Math.ceil(count / perFragment), TREE_SEGMENTS)));
}

const TREE_SEGMENTS = 8;

/**
 * tree with the q8 wire (not pipelined): the root settles its values to what receivers
 * decode, and every rank forwards the packing it received unchanged (re-quantising decoded
 * values could differ), so all ranks end identical.
 */
async function allReduceTreeQ8(call: Call, data: DTypeArray, tree: Tree): Promise<void> {
  const me = call.rank;
  for (const child of tree.children[me] ?? []) await call.drive(call.recvReduce(child, data, 0, 0));
  const parent = tree.parent[me] as number;
  let wire: Uint8Array;
  if (parent >= 0) {
    await call.drive(call.send(parent, call.encode(data), 0, 0));
    wire = await call.drive(call.recv(parent, call.wireBytes(data.length), 0, 1));
    call.copyFrom(data, wire);
  } else {
    wire = call.settle(data);
  }
  await call.driveAll((tree.children[me] ?? []).map((c) => call.send(c, wire, 0, 1)));
}
