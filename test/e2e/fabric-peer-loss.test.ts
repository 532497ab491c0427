import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Access, openDevice, type ProviderName, type WorkCompletion } from '../../src/fabric/index.js';
import { sweepStale } from '../../src/fabric/shm-ffi.js';

const peerScript = join(import.meta.dirname, 'fabric-peer.ts');

/** A real child process as the peer; SIGKILL it and expect peer_lost on everything within 2 s. */
async function killPeer(provider: ProviderName): Promise<void> {
  const dev = await openDevice(provider);
  const l = await dev.listen({ host: '127.0.0.1', port: 0, secret: 'e2e-secret' });
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', peerScript, provider, String(l.port), 'e2e-secret'],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  try {
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const qp = await l.accept({ pd, cq, timeoutMs: 20_000 });
    const ready = await new Promise<string>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`peer not ready: ${out}`)), 20_000);
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) {
          clearTimeout(timer);
          resolve(out.trim());
        }
      });
    });
    const [, addr, rkey] = ready.split(' ');
    assert.equal(qp.peerInfo.pid, child.pid);
    const mr = pd.allocate(1 << 16, Access.LOCAL_WRITE);
    // one round trip proves the connection works before the kill
    qp.postSend({
      wrId: 1,
      opcode: 'write',
      sgl: [mr.sge(0, 128)],
      remote: { addr: BigInt(addr as string), rkey: Number(rkey) },
    });
    assert.equal((await cq.wait({ timeoutMs: 5000 }))[0]?.status, 'success');
    for (let i = 0; i < 4; i++) qp.postRecv({ wrId: 10 + i, sgl: [mr.sge(i * 64, 64)] });
    child.kill('SIGKILL');
    // everything pending completes with peer_lost within the 2 s deadline (the wait throws otherwise)
    const wcs: WorkCompletion[] = await cq.wait({ min: 4, timeoutMs: 2000 });
    assert.deepEqual(
      wcs.map((w) => [w.wrId, w.status]),
      [10, 11, 12, 13].map((id) => [id, 'peer_lost']),
    );
    qp.postSend({
      wrId: 20,
      opcode: 'read',
      sgl: [mr.sge(0, 8)],
      remote: { addr: BigInt(addr as string), rkey: Number(rkey) },
    });
    const later = await cq.wait({ timeoutMs: 2000 });
    assert.deepEqual([later[0]?.wrId, later[0]?.status], [20, 'peer_lost']);
  } finally {
    const gone = new Promise((r) =>
      child.exitCode !== null || child.signalCode !== null ? r(null) : child.once('exit', r),
    );
    child.kill('SIGKILL');
    await Promise.race([gone, new Promise((r) => setTimeout(r, 5000))]);
    await l.close();
    await dev.close();
    // a SIGKILLed shm peer cannot remove its bell segment: the survivor sweeps it
    if (provider === 'shm') assert.ok(sweepStale() >= 1, 'the dead peer left its bell segment to sweep');
  }
}

for (const provider of ['tcp', 'shm'] as const) {
  test(
    `${provider}: a peer killed with SIGKILL turns pending and later work into peer_lost`,
    { timeout: 60_000 },
    () => killPeer(provider),
  );
}
