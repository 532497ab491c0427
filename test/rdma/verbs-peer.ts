/**
 * The peer process of verbs-peer-loss.test.ts: one RC queue pair and a writable region on
 * the device, its endpoint printed as a JSON line, the parent's read from stdin, then
 * "ready" and idle until killed (or 120 s pass).
 */
import { createInterface } from 'node:readline';
import { chooseGid, RdmaContext } from '../../src/fabric/rdma-context.js';
import { RdmaQp } from '../../src/fabric/rdma-qp.js';
import { RdmaCq, RdmaPd } from '../../src/fabric/rdma-resources.js';
import { Access } from '../../src/fabric/types.js';

const ctx = RdmaContext.open(process.env['TANDEM_RDMA_DEVICE']);
const gid = chooseGid(ctx.gids(), process.env['TANDEM_RDMA_IPV4']);
if (!gid) throw new Error('no usable GID');
const pd = new RdmaPd(ctx);
const cq = new RdmaCq(ctx, 16);
const qp = new RdmaQp(pd, 'rc', cq, cq, { maxSendWr: 4, maxRecvWr: 4, maxSge: 1, maxInline: 0 });
const mr = pd.register(new Uint8Array(4096), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
const ep = qp.endpoint(gid.gid);
process.stdout.write(
  JSON.stringify({ ...ep, gid: Buffer.from(ep.gid).toString('hex'), addr: String(mr.addr), rkey: mr.rkey }) +
    '\n',
);
const lines = createInterface({ input: process.stdin });
lines.once('line', (line) => {
  const peer = JSON.parse(line) as { qpNum: number; psn: number; gid: string; mtu: number };
  qp.connect({ ...peer, gid: new Uint8Array(Buffer.from(peer.gid, 'hex')) }, gid.index, 7);
  process.stdout.write('ready\n');
});
setTimeout(() => process.exit(0), 120_000);
