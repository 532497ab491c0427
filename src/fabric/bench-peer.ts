// Rank 1 of `tandem bench fabric`: mirrors bench.ts's measure() step by step (a latency pass
// lasts until rank 0 says it ended: rank 0 warms up by time).
import { Access, openDevice, type ProviderName } from './index.js';
import { awaitImm, END_PASS, immWr, remoteOf, spinImm, writeImm, type Endpoint, type Plan } from './bench.js';

const [provider, port, planJson] = process.argv.slice(2) as [ProviderName, string, string];
const plan = JSON.parse(planJson) as Plan;
const secret = process.env.TANDEM_BENCH_SECRET ?? '';
const watchdog = setTimeout(() => process.exit(4), 600_000);
watchdog.unref();

const dev = await openDevice(provider);
const pd = dev.allocPd();
const cq = dev.createCq();
const rcq = dev.createCq();
const local = pd.allocate(Math.max(...plan.sizes), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
const region = { addr: String(local.addr), rkey: local.rkey, length: local.length };
const qp = await dev.connect({
  host: '127.0.0.1',
  port: Number(port),
  secret,
  pd,
  cq,
  recvCq: rcq,
  info: { region },
  timeoutMs: 120_000,
});
const e: Endpoint = { qp, cq, rcq, local, remote: remoteOf(qp.peerInfo) };
for (let i = 0; i < 8; i++) qp.postRecv({ wrId: 0, sgl: [] });

for (const bytes of plan.sizes) {
  const wr = immWr(e, bytes, 3);
  // each latency pass: answer every write until the one that ends the pass
  for (const poll of [true, false]) {
    for (;;) {
      let imm = poll ? spinImm(e) : undefined;
      if (imm === undefined) imm = await awaitImm(e, poll);
      if (imm === END_PASS) break;
      qp.postSend(wr);
    }
  }
  await awaitImm(e);
  writeImm(e, 0, 4);
  await awaitImm(e);
  writeImm(e, 0, 5);
}
// the listener closes first; a short grace lets our last acks go out
await new Promise((r) => setTimeout(r, 100));
await dev.close();
process.exit(0);
