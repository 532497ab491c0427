import { randomBytes } from 'node:crypto';
import { listDevices } from './rdma-context.js';
import { RdmaDevice } from './rdma-provider.js';
import type { QpType } from './rdma-resources.js';
import { loadVerbs } from './rdma-verbs.js';
import { Access, type WorkCompletion } from './types.js';

/**
 * A check of each verbs device through the rdma provider, for `tandem doctor --mode rdma`: two
 * devices opened on it connect over the side channel on 127.0.0.1 (the device delivers between
 * its own queue pairs), and a 4 KiB RDMA WRITE and a SEND must arrive with their bytes. It
 * proves the library, the port, the GID choice, registration and the queue pair transitions
 * together; a cable to another host is beyond it.
 */
export interface RdmaPortCheck {
  device: string;
  qpType: QpType;
  ok: boolean;
  /** What worked, or the error that stopped it. */
  detail: string;
}

const BYTES = 4096;
const DEADLINE_MS = 10_000;

/** Checks every verbs device ([] where there is no library or no device). */
export async function checkRdmaPorts(qpType?: QpType): Promise<RdmaPortCheck[]> {
  const verbs = loadVerbs();
  if (!verbs) return [];
  const out: RdmaPortCheck[] = [];
  for (const { name } of listDevices(verbs)) out.push(await checkPort(name, qpType));
  return out;
}

async function checkPort(name: string, qpType: QpType | undefined): Promise<RdmaPortCheck> {
  const opened: RdmaDevice[] = [];
  let type: QpType = qpType ?? 'rc';
  try {
    const a = new RdmaDevice({ name, ...(qpType ? { qpType } : {}) });
    opened.push(a);
    type = a.qpType;
    const b = new RdmaDevice({ name, qpType: a.qpType });
    opened.push(b);
    const secret = randomBytes(16).toString('hex');
    const [pa, pb] = [a.allocPd(), b.allocPd()];
    const [ca, cb] = [a.createCq(), b.createCq()];
    const listener = await b.listen({ host: '127.0.0.1', port: 0, secret });
    const [qb, qa] = await Promise.all([
      listener.accept({ pd: pb, cq: cb, timeoutMs: DEADLINE_MS }),
      a.connect({ host: '127.0.0.1', port: listener.port, secret, pd: pa, cq: ca, timeoutMs: DEADLINE_MS }),
    ]);
    await listener.close();
    const src = pa.allocate(BYTES, Access.NONE);
    src.buffer.set(randomBytes(BYTES));
    const dst = pb.allocate(2 * BYTES, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    qb.postRecv({ wrId: 1, sgl: [dst.sge(BYTES, BYTES)] });
    qa.postSend({ wrId: 2, opcode: 'write', sgl: [src.sge()], remote: dst.remote(0) });
    qa.postSend({ wrId: 3, opcode: 'send', sgl: [src.sge()] });
    const sent = await ca.wait({ min: 2, timeoutMs: DEADLINE_MS });
    const got = await cb.wait({ timeoutMs: DEADLINE_MS });
    const bad = [...sent, ...got].find((w: WorkCompletion) => w.status !== 'success');
    if (bad)
      return { device: name, qpType: type, ok: false, detail: `work request ${bad.wrId}: ${bad.status}` };
    const same = (off: number): boolean =>
      Buffer.compare(dst.buffer.subarray(off, off + BYTES), src.buffer) === 0;
    if (!same(0) || !same(BYTES))
      return { device: name, qpType: type, ok: false, detail: 'completions succeeded but the bytes differ' };
    return {
      device: name,
      qpType: type,
      ok: true,
      detail: `${type.toUpperCase()} write and send of ${BYTES} B arrived intact (MTU enum ${a.context.port.activeMtu})`,
    };
  } catch (e) {
    return { device: name, qpType: type, ok: false, detail: (e as Error).message };
  } finally {
    for (const d of opened) await d.close();
  }
}
