/**
 * The verbs layer's own figures on a real device, for comparison with perftest in the same
 * guest (guest-job.sh): 8-byte RDMA WRITE WITH IMMEDIATE ping-pong between two queue pairs
 * of one device (half the round trip, median, like ib_write_lat's t_typical) and 4 MiB RDMA
 * WRITEs one way with 4 in flight (MiB/s, perftest's unit). One process drives both ends by
 * busy-polling their completion queues. Prints one JSON line per figure.
 *   TANDEM_RDMA_DEVICE=rxe0 node --import tsx test/rdma/verbs-bench.ts
 */
import { performance } from 'node:perf_hooks';
import { chooseGid, RdmaContext } from '../../src/fabric/rdma-context.js';
import { RdmaQp } from '../../src/fabric/rdma-qp.js';
import { RdmaCq, RdmaPd, type RawCompletion } from '../../src/fabric/rdma-resources.js';
import { Access } from '../../src/fabric/types.js';

const DEADLINE_MS = 30_000;

function spin(cq: RdmaCq): RawCompletion {
  const end = performance.now() + DEADLINE_MS;
  for (;;) {
    const [wc] = cq.poll(1);
    if (wc) {
      if (wc.status !== 'success') throw new Error(`completion failed: ${wc.verbsStatus}`);
      return wc;
    }
    if (performance.now() > end) throw new Error(`no completion within ${DEADLINE_MS} ms`);
  }
}

const ctx = RdmaContext.open(process.env['TANDEM_RDMA_DEVICE']);
const gid = chooseGid(ctx.gids(), process.env['TANDEM_RDMA_IPV4']);
if (!gid) throw new Error('no usable GID');
const pd = new RdmaPd(ctx);
const cqA = new RdmaCq(ctx, 256);
const cqB = new RdmaCq(ctx, 256);
const caps = { maxSendWr: 64, maxRecvWr: 64, maxSge: 1, maxInline: 64 };
const a = new RdmaQp(pd, 'rc', cqA, cqA, caps);
const b = new RdmaQp(pd, 'rc', cqB, cqB, caps);
const all = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;
a.connect(b.endpoint(gid.gid), gid.index, 7);
b.connect(a.endpoint(gid.gid), gid.index, 7);
const bigA = pd.register(new Uint8Array(4 << 20), all);
const bigB = pd.register(new Uint8Array(4 << 20), all);

const iters = Number(process.env['TANDEM_BENCH_ITERS'] ?? 1000);
const half: number[] = [];
for (let i = 0; i < iters; i++) {
  const t0 = performance.now();
  b.postRecv({ wrId: i, sgl: [] });
  a.postSend({
    wrId: i,
    opcode: 'write_imm',
    imm: i,
    inline: true,
    signaled: false,
    sgl: [bigA.sge(0, 8)],
    remote: { addr: bigB.addr, rkey: bigB.rkey },
  });
  spin(cqB);
  a.postRecv({ wrId: i, sgl: [] });
  b.postSend({
    wrId: i,
    opcode: 'write_imm',
    imm: i,
    inline: true,
    signaled: false,
    sgl: [bigB.sge(0, 8)],
    remote: { addr: bigA.addr, rkey: bigA.rkey },
  });
  spin(cqA);
  half.push(((performance.now() - t0) * 1000) / 2);
}
half.sort((x, y) => x - y);
const p50 = half[Math.floor(half.length / 2)] ?? 0;
console.log(
  JSON.stringify({
    bench: 'tandem-verbs',
    op: 'write_imm',
    bytes: 8,
    iterations: iters,
    latency_us_p50: Number(p50.toFixed(2)),
  }),
);

const writes = Number(process.env['TANDEM_BENCH_WRITES'] ?? 20);
const window = 4;
let posted = 0;
let done = 0;
const t0 = performance.now();
while (done < writes) {
  while (posted < writes && posted - done < window) {
    a.postSend({
      wrId: posted++,
      opcode: 'write',
      sgl: [bigA.sge(0, 4 << 20)],
      remote: { addr: bigB.addr, rkey: bigB.rkey },
    });
  }
  spin(cqA);
  done++;
}
const seconds = (performance.now() - t0) / 1000;
const mibps = (writes * 4) / seconds;
console.log(
  JSON.stringify({
    bench: 'tandem-verbs',
    op: 'write',
    bytes: 4 << 20,
    writes,
    bandwidth_MBps: Number(mibps.toFixed(2)),
  }),
);

a.close();
b.close();
bigA.deregister();
bigB.deregister();
cqA.close();
cqB.close();
pd.close();
ctx.close();
