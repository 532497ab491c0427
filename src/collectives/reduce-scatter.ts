import type { DTypeArray } from '../kernels/dtype.js';
import { reduceFast as reduceInto } from '../kernels/reduce-native.js';
import { laneChunks, ringLanes, ringReduceScatterLane } from './all-reduce.js';
import { chunkRanges, type Range } from './chunks.js';
import { span, sub, type Call } from './call.js';
import { rhdPlan } from './schedules.js';

/**
 * Reduce-scatter: `data` holds `count` values on every rank; afterwards rank r's chunk
 * (chunkRanges(count, size)[r]: sizes differ by at most one) holds the reduction over all
 * ranks. The rest of `data` is scratch.
 */

export async function reduceScatterMesh(call: Call, data: DTypeArray): Promise<void> {
  const { rank, size } = call;
  const chunks = chunkRanges(data.length, size);
  const own = chunks[rank] as Range;
  const sent: Promise<void>[] = [];
  for (let r = 0; r < size; r++)
    if (r !== rank) sent.push(call.send(r, call.encode(sub(data, chunks[r] as Range))));
  const got = new Map<number, Uint8Array>();
  for (let r = 0; r < size; r++)
    if (r !== rank) got.set(r, await call.drive(call.recv(r, call.wireBytes(own.count))));
  await call.driveAll(sent);
  const acc = call.comm.scratch(call.spec.dtype, own.count);
  const mine = sub(data, own);
  for (let r = 0; r < size; r++) {
    const payload = got.get(r);
    if (r === 0) {
      if (payload) call.copyFrom(acc, payload);
      else acc.set(mine);
    } else if (payload) call.reduceFrom(acc, payload);
    else reduceInto(call.op, call.spec.dtype, acc, mine);
  }
  mine.set(acc);
}

export async function reduceScatterRing(
  call: Call,
  data: DTypeArray,
  order: readonly number[],
): Promise<void> {
  const chunks = chunkRanges(data.length, call.size);
  const lanes = ringLanes(order, data.length, 1, call.comm.wires);
  await Promise.all(
    lanes.map((o, lane) =>
      ringReduceScatterLane(
        call,
        data,
        o,
        laneChunks(chunks, o, lanes.length, lane, 1),
        lane,
        undefined,
        lanes.length === 1,
      ),
    ),
  );
}

/** Recursive halving; needs a power-of-two size (the communicator falls back otherwise). */
export async function reduceScatterRhd(call: Call, data: DTypeArray): Promise<void> {
  const plan = rhdPlan(call.size, call.rank);
  const chunks = chunkRanges(data.length, call.size);
  for (let i = 0; i < plan.steps.length; i++) {
    const st = plan.steps[i] as (typeof plan.steps)[number];
    const give = span(chunks, st.give[0], st.give[1]);
    const keep = span(chunks, st.keep[0], st.keep[1]);
    const out = call.send(st.partner, call.encode(sub(data, give)), 0, i);
    await call.drive(call.recvReduce(st.partner, sub(data, keep), 0, i));
    await call.drive(out);
  }
}
