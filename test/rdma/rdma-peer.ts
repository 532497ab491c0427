/**
 * The peer process of rdma-peer-loss.test.ts: connects to the listener on argv[2] over the
 * rdma provider (RC) with a writable region described in its info, then idles until killed
 * (or 200 s pass).
 */
import { Access, openDevice } from '../../src/fabric/index.js';

const dev = await openDevice('rdma');
const pd = dev.allocPd();
const cq = dev.createCq();
const mr = pd.allocate(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
await dev.connect({
  host: '127.0.0.1',
  port: Number(process.argv[2]),
  secret: 'peer-loss',
  pd,
  cq,
  info: { addr: String(mr.addr), rkey: mr.rkey },
  timeoutMs: 120_000,
});
process.stdout.write('ready\n');
setTimeout(() => process.exit(0), 200_000);
