// Child process for the idle link-down test: one end of a tcp queue pair inside a namespace.
// `listen HOST PORT` prints `{"listening":true}` and accepts one peer; `connect HOST PORT`
// dials it. Each end posts one receive, prints `{"ready":true}`, then sends nothing: it prints
// `{"status", "at"}` (Date.now()) when that receive completes, or `{"status":"none"}` after
// WAIT_MS.
import { Access, openDevice, type WorkCompletion } from '../../src/fabric/index.js';

const WAIT_MS = 15_000;
const [role, host, port] = process.argv.slice(2) as [string, string, string];
const secret = 'netns-idle-link-secret';
const dev = await openDevice('tcp');
const pd = dev.allocPd();
const cq = dev.createCq();
const say = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
let qp;
if (role === 'listen') {
  const listener = await dev.listen({ host, port: Number(port), secret });
  say({ listening: true });
  qp = await listener.accept({ pd, cq, timeoutMs: 20_000 });
} else {
  qp = await dev.connect({ host, port: Number(port), secret, pd, cq, timeoutMs: 20_000 });
}
const mr = pd.allocate(4096, Access.LOCAL_WRITE);
qp.postRecv({ wrId: 1, sgl: [mr.sge(0, 64)] });
say({ ready: true });
let wcs: WorkCompletion[];
try {
  wcs = await cq.wait({ timeoutMs: WAIT_MS });
} catch {
  wcs = [];
}
say({ status: wcs[0]?.status ?? 'none', at: Date.now() });
process.exit(0);
