import type { DTypeArray } from '../kernels/dtype.js';
import { WHOLE_MAX, type Call } from './call.js';
import { pairwiseSteps } from './schedules.js';

/**
 * All-to-all with per-rank counts (MoE token exchange): rank r sends sendCounts[j] values to
 * rank j (taken in rank order from `send`) and receives recvCounts[j] values from j into
 * `recv` (in rank order). Pairwise order; pairs without a link are relayed.
 */
export async function allToAllPairwise(
  call: Call,
  send: DTypeArray,
  sendCounts: readonly number[],
  recv: DTypeArray,
  recvCounts: readonly number[],
): Promise<void> {
  const { rank, size } = call;
  const sOff = offsets(sendCounts);
  const rOff = offsets(recvCounts);
  recv.set(send.subarray(sOff[rank], (sOff[rank] as number) + (sendCounts[rank] as number)), rOff[rank]);
  const steps = pairwiseSteps(size, rank);
  const sent = steps.map((s) =>
    call.send(
      s.to,
      call.encode(send.subarray(sOff[s.to], (sOff[s.to] as number) + (sendCounts[s.to] as number))),
    ),
  );
  const into = (from: number): DTypeArray =>
    recv.subarray(rOff[from], (rOff[from] as number) + (recvCounts[from] as number));
  const bytes = recvCounts.map((c) => call.wireBytes(c));
  if (steps.every((s) => (bytes[s.from] as number) <= WHOLE_MAX)) {
    // small: as the mesh all-reduce, poll until every part is in, then take them whole
    const from = new Array<Uint8Array | undefined>(size);
    await call.takeAll(steps, bytes, from);
    for (const s of steps) {
      const payload = from[s.from] as Uint8Array;
      call.copyFrom(into(s.from), payload);
      call.release(payload);
    }
  } else await call.driveAll(steps.map((s) => call.recvCopy(s.from, into(s.from))));
  await call.driveAll(sent);
}

export function offsets(counts: readonly number[]): number[] {
  const out: number[] = [];
  let at = 0;
  for (const c of counts) {
    out.push(at);
    at += c;
  }
  return out;
}
