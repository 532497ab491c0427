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
 *
 * Every check ends with a verdict within its deadline, closing included: `ok`, `failed` (the
 * error or the bad completion in `detail`) or `timeout` (the step that did not finish).
 */
export type RdmaPortVerdict = 'ok' | 'failed' | 'timeout';

export interface RdmaPortCheck {
  device: string;
  qpType: QpType;
  verdict: RdmaPortVerdict;
  /** verdict === 'ok'. */
  ok: boolean;
  /** What worked, or what stopped it. */
  detail: string;
}

export interface RdmaPortCheckOptions {
  /** The whole check of one device, from opening to closing (default 60 s). */
  deadlineMs?: number;
}

const BYTES = 4096;
/** Each wait inside a check: the connection, the completions. */
const STEP_MS = 10_000;
/** A check of one device, its connection and transfers included; under software emulation it takes ~15 s. */
const CHECK_MS = 60_000;
/** Closing the devices after a verdict, so that a stuck close cannot hold doctor. */
const CLOSE_MS = 5_000;

/**
 * Checks every verbs device ([] where there is no library or no device) with queue pairs of
 * `qpType` (default: the provider's, TANDEM_RDMA_QP else rc; uc on macOS).
 */
export async function checkRdmaPorts(
  qpType?: QpType,
  options: RdmaPortCheckOptions = {},
): Promise<RdmaPortCheck[]> {
  const verbs = loadVerbs();
  if (!verbs) return [];
  const out: RdmaPortCheck[] = [];
  for (const { name } of listDevices(verbs)) out.push(await checkPort(name, qpType, options));
  return out;
}

/** What a check of one device reached: the devices it opened and the step it is in. */
interface Progress {
  opened: RdmaDevice[];
  qpType: QpType;
  step: string;
  /** Set once the verdict is given: the devices are closing, the transfer must touch them no more. */
  over: boolean;
}

async function checkPort(
  name: string,
  qpType: QpType | undefined,
  options: RdmaPortCheckOptions,
): Promise<RdmaPortCheck> {
  const deadlineMs = options.deadlineMs ?? CHECK_MS;
  const at: Progress = { opened: [], qpType: qpType ?? 'rc', step: 'opening the device', over: false };
  const verdict = (v: RdmaPortVerdict, detail: string): RdmaPortCheck => ({
    device: name,
    qpType: at.qpType,
    verdict: v,
    ok: v === 'ok',
    detail,
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<RdmaPortCheck>((resolve) => {
    timer = setTimeout(
      () => resolve(verdict('timeout', `no verdict within ${deadlineMs} ms (stopped while ${at.step})`)),
      deadlineMs,
    );
  });
  try {
    return await Promise.race([
      transfer(name, qpType, at).then(
        (failure) => (failure === undefined ? verdict('ok', okDetail(at)) : verdict('failed', failure)),
        (e: unknown) => verdict('failed', `${at.step}: ${(e as Error).message}`),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
    at.over = true;
    await closeWithin(at.opened, CLOSE_MS);
  }
}

function okDetail(at: Progress): string {
  const mtu = at.opened[0]?.context.port.activeMtu;
  return `${at.qpType.toUpperCase()} write and send of ${BYTES} B arrived intact (MTU enum ${mtu})`;
}

/** The write and the send; undefined when both arrived intact, else what went wrong. */
async function transfer(name: string, qpType: QpType | undefined, at: Progress): Promise<string | undefined> {
  const a = new RdmaDevice({ name, ...(qpType ? { qpType } : {}) });
  at.opened.push(a);
  at.qpType = a.qpType;
  const b = new RdmaDevice({ name, qpType: a.qpType });
  at.opened.push(b);
  const secret = randomBytes(16).toString('hex');
  const [pa, pb] = [a.allocPd(), b.allocPd()];
  const [ca, cb] = [a.createCq(), b.createCq()];
  at.step = 'connecting two queue pairs over the side channel on 127.0.0.1';
  const listener = await b.listen({ host: '127.0.0.1', port: 0, secret });
  if (at.over) {
    await listener.close();
    return 'abandoned after its deadline';
  }
  const [qb, qa] = await Promise.all([
    listener.accept({ pd: pb, cq: cb, timeoutMs: STEP_MS }),
    a.connect({ host: '127.0.0.1', port: listener.port, secret, pd: pa, cq: ca, timeoutMs: STEP_MS }),
  ]);
  await listener.close();
  if (at.over) return 'abandoned after its deadline';
  at.step = `waiting for a ${BYTES} B write and send`;
  const src = pa.allocate(BYTES, Access.NONE);
  src.buffer.set(randomBytes(BYTES));
  const dst = pb.allocate(2 * BYTES, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
  qb.postRecv({ wrId: 1, sgl: [dst.sge(BYTES, BYTES)] });
  qa.postSend({ wrId: 2, opcode: 'write', sgl: [src.sge()], remote: dst.remote(0) });
  qa.postSend({ wrId: 3, opcode: 'send', sgl: [src.sge()] });
  const sent = await ca.wait({ min: 2, timeoutMs: STEP_MS });
  const got = await cb.wait({ timeoutMs: STEP_MS });
  const bad = [...sent, ...got].find((w: WorkCompletion) => w.status !== 'success');
  if (bad) return `work request ${bad.wrId}: ${bad.status}`;
  const same = (off: number): boolean =>
    Buffer.compare(dst.buffer.subarray(off, off + BYTES), src.buffer) === 0;
  if (!same(0) || !same(BYTES)) return 'completions succeeded but the bytes differ';
  at.step = 'closing';
  return undefined;
}

/** Closes the devices, giving up (they are this process's; it exits after doctor) after `ms`. */
async function closeWithin(devices: readonly RdmaDevice[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  const closing = (async () => {
    for (const d of devices) await d.close().catch(() => undefined);
  })();
  await Promise.race([closing, gaveUp]);
  clearTimeout(timer);
}
