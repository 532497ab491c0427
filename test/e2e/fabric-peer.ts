// Child process for fabric e2e tests: connects to the parent's listener, exposes a region,
// says "ready <addr> <rkey>" on stdout, then idles until killed (or 60 s pass).
import { Access, openDevice, type ProviderName } from '../../src/fabric/index.js';

const [provider, port, secret] = process.argv.slice(2) as [ProviderName, string, string];
const dev = await openDevice(provider);
const pd = dev.allocPd();
const cq = dev.createCq();
const qp = await dev.connect({
  host: '127.0.0.1',
  port: Number(port),
  secret,
  pd,
  cq,
  info: { pid: process.pid },
  timeoutMs: 10_000,
});
const mr = pd.allocate(1 << 16, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ);
qp.postRecv({ wrId: 1, sgl: [mr.sge(0, 64)] });
process.stdout.write(`ready ${mr.addr} ${mr.rkey}\n`);
const idle = setTimeout(() => process.exit(3), 60_000);
void idle;
