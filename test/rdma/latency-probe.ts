/**
 * Where the time of an 8 B ping-pong between two processes goes (guest-job.sh runs it beside
 * ib_write_lat): the cost of the single steps in this process (an empty poll of the completion
 * queue, a posted write, an event-loop turn), then the ping-pong of `tandem bench fabric`
 * (RDMA WRITE WITH IMMEDIATE of 8 B, half the round trip) completed three ways, against a
 * child process: busy `poll()`, `await wait()` (its spin window, then the completion channel),
 * and `await wait({ spin: false })` (straight to the completion channel); then the same polled
 * ping-pong between two queue pairs of this one process. Prints one JSON line per figure.
 * With `one` after the round trips, only the one-process row (profile-job.sh profiles it).
 *   TANDEM_RDMA_DEVICE=rxe0 node --import tsx test/rdma/latency-probe.ts [provider] [round trips] [one]
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { awaitImm, remoteOf, spinImm, writeImm, type Endpoint } from '../../src/fabric/bench.js';
import {
  Access,
  expectSuccess,
  openDevice,
  type ConnectOptions,
  type Device,
  type ProviderName,
} from '../../src/fabric/index.js';

const MODES = ['poll', 'wait', 'sleep'] as const;
type Mode = (typeof MODES)[number];
const SECRET = 'latency-probe-secret';
const WARM = 100;

async function endpointOf(dev: Device, connect: (o: object) => Promise<Endpoint['qp']>): Promise<Endpoint> {
  const pd = dev.allocPd();
  const cq = dev.createCq();
  const rcq = dev.createCq();
  const local = pd.allocate(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
  const region = { addr: String(local.addr), rkey: local.rkey, length: local.length };
  const qp = await connect({ pd, cq, recvCq: rcq, info: { region }, secret: SECRET, timeoutMs: 120_000 });
  for (let i = 0; i < 8; i++) qp.postRecv({ wrId: 0, sgl: [] });
  return { qp, cq, rcq, local, remote: { addr: 0n, rkey: 0, length: 0 } };
}

const withRemote = (e: Endpoint): Endpoint => ({ ...e, remote: remoteOf(e.qp.peerInfo) });

async function receive(e: Endpoint, mode: Mode): Promise<void> {
  if (mode === 'poll') {
    if (spinImm(e) === undefined) await awaitImm(e, true);
    return;
  }
  const [wc] = expectSuccess(await e.rcq.wait({ timeoutMs: 120_000, max: 1, spin: mode === 'wait' }));
  if (wc === undefined) throw new Error('no completion');
  e.qp.postRecv({ wrId: 0, sgl: [] });
}

function figures(label: string, half: number[], extra: Record<string, unknown> = {}): void {
  half.sort((a, b) => a - b);
  const at = (p: number): number => Number((half[Math.floor((p / 100) * (half.length - 1))] ?? 0).toFixed(1));
  console.log(
    JSON.stringify({ probe: label, bytes: 8, p10_us: at(10), p50_us: at(50), p90_us: at(90), ...extra }),
  );
}

/** The cost of one step, averaged over `n` calls, in us. */
function cost(n: number, step: () => void): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) step();
  return Number((((performance.now() - t0) * 1000) / n).toFixed(2));
}

async function parent(provider: ProviderName, trips: number): Promise<void> {
  const dev = await openDevice(provider);
  // the steps alone, before the child starts (its spinning would take a vCPU)
  const idle = dev.createCq();
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));
  const turns = 200;
  const t0 = performance.now();
  for (let i = 0; i < turns; i++) await turn();
  const turnUs = Number((((performance.now() - t0) * 1000) / turns).toFixed(2));
  console.log(
    JSON.stringify({
      probe: 'steps',
      empty_poll_us: cost(2000, () => idle.poll(1)),
      now_us: cost(2000, () => performance.now()),
      date_now_us: cost(2000, () => Date.now()),
      event_loop_turn_us: turnUs,
    }),
  );
  const listener = await dev.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
  const self = fileURLToPath(import.meta.url);
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', self, 'peer', provider, String(trips), String(listener.port)],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  const e = withRemote(await endpointOf(dev, (o) => listener.accept(o as never)));
  for (const mode of MODES) {
    const half: number[] = [];
    const post: number[] = [];
    for (let i = 0; i < WARM + trips; i++) {
      const t = performance.now();
      writeImm(e, 8, 2);
      const posted = performance.now();
      await receive(e, mode);
      if (i >= WARM) {
        half.push(((performance.now() - t) * 1000) / 2);
        post.push((posted - t) * 1000);
      }
    }
    post.sort((a, b) => a - b);
    figures(`two processes, ${mode}`, half, {
      post_us_p50: Number((post[post.length >> 1] ?? 0).toFixed(1)),
    });
  }
  await new Promise((r) => child.once('exit', r));
  await oneProcess(dev, listener.port, trips);
  await listener.close();
  await dev.close();
}

/** Two queue pairs of this process, one polled ping-pong: the fabric layer without a second process. */
async function oneProcess(dev: Device, port: number, trips: number): Promise<void> {
  const listener = await dev.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
  const [a0, b0] = await Promise.all([
    endpointOf(dev, (o) => listener.accept(o as never)),
    endpointOf(dev, (o) => dev.connect({ ...(o as ConnectOptions), host: '127.0.0.1', port: listener.port })),
  ]);
  void port;
  const a = withRemote(a0);
  const b = withRemote(b0);
  const half: number[] = [];
  for (let i = 0; i < WARM + trips; i++) {
    const t = performance.now();
    writeImm(a, 8, 2);
    if (spinImm(b) === undefined) await awaitImm(b, true);
    writeImm(b, 8, 3);
    if (spinImm(a) === undefined) await awaitImm(a, true);
    if (i >= WARM) half.push(((performance.now() - t) * 1000) / 2);
  }
  figures('one process, poll', half);
  await listener.close();
}

async function peer(provider: ProviderName, trips: number, port: number): Promise<void> {
  const dev = await openDevice(provider);
  const e = withRemote(
    await endpointOf(dev, (o) => dev.connect({ ...(o as ConnectOptions), host: '127.0.0.1', port })),
  );
  for (const mode of MODES) {
    for (let i = 0; i < WARM + trips; i++) {
      await receive(e, mode);
      writeImm(e, 8, 3);
    }
  }
  await new Promise((r) => setTimeout(r, 200));
  await dev.close();
  process.exit(0);
}

const args = process.argv.slice(2);
if (args[0] === 'peer') await peer(args[1] as ProviderName, Number(args[2]), Number(args[3]));
else if (args[2] === 'one') {
  const dev = await openDevice((args[0] ?? 'rdma') as ProviderName);
  await oneProcess(dev, 0, Number(args[1] ?? 300));
  await dev.close();
} else await parent((args[0] ?? 'rdma') as ProviderName, Number(args[1] ?? 300));
