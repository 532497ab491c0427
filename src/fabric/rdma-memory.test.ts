import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { RdmaDomain, RdmaRegionTable, regionsInUse } from './rdma-memory.js';
import type { RdmaMr, RdmaPd } from './rdma-resources.js';
import { Access, type Device } from './types.js';

/**
 * The rdma provider's regions and slab pool over a stand-in for the verbs protection domain
 * (ibv_reg_mr needs a device; the guest runs the pool on rxe through the conformance suite).
 */
function fakePd(): { pd: RdmaPd; registered: () => number } {
  let live = 0;
  let next = 1;
  const pd = {
    register(buffer: Uint8Array): RdmaMr {
      live++;
      const key = next++;
      return {
        lkey: key,
        rkey: key + 1000,
        addr: 0x10000n * BigInt(key),
        buffer,
        deregister: () => {
          live--;
        },
      } as unknown as RdmaMr;
    },
  } as unknown as RdmaPd;
  return { pd, registered: () => live };
}

test('rdma pool: small buffers share slabs, the cap is a typed error, devinfo sees the use', () => {
  const { pd, registered } = fakePd();
  const table = new RdmaRegionTable('fake0', 3);
  const domain = new RdmaDomain({} as Device, pd, table);
  const pool = domain.createPool({ chunkBytes: 1 << 16 });
  const slices = Array.from({ length: 100 }, () => pool.acquire(500));
  // 100 slices of 512 bytes: one 64 KiB slab, one registration
  assert.equal(registered(), 1);
  assert.deepEqual([pool.stats().misses, pool.stats().hits, pool.stats().regions], [1, 99, 1]);
  const offsets = new Set(slices.map((s) => s.offset));
  assert.equal(offsets.size, 100);
  assert.ok(slices.every((s) => s.mr === slices[0]?.mr && s.offset % 64 === 0));
  assert.equal(regionsInUse('fake0'), 1);
  domain.allocate(64, Access.LOCAL_WRITE);
  domain.allocate(64, Access.LOCAL_WRITE);
  assert.throws(
    () => domain.allocate(64, Access.LOCAL_WRITE),
    (e: unknown) =>
      isTandemError(e, 'FABRIC_KEY_EXHAUSTED') && /allows 3/.test(e.message) && /pool/.test(e.hint ?? ''),
  );
  pool.close();
  assert.equal(slices[0]?.mr.live, false);
  assert.equal(regionsInUse('fake0'), 2);
  assert.equal(registered(), 2);
});

test('rdma regions: an address range is inside a region or it is not', () => {
  const { pd } = fakePd();
  const domain = new RdmaDomain({} as Device, pd, new RdmaRegionTable('fake1', 10));
  const r = domain.allocate(4096, Access.LOCAL_WRITE);
  assert.equal(r.offsetOf(r.addr, 4096), 0);
  assert.equal(r.offsetOf(r.addr + 4000n, 96), 4000);
  assert.equal(r.offsetOf(r.addr + 4000n, 97), -1);
  assert.equal(r.offsetOf(r.addr - 1n, 1), -1);
  assert.equal(r.offsetOf(r.addr + 2n ** 32n, 1), -1, '4 GiB past the base');
  assert.equal(r.offsetOf(r.addr - 2n ** 32n + 8n, 1), -1, 'below the base by the high half');
  assert.equal(r.offsetOf(0n, 1), -1);
  assert.equal(r.offsetOf(r.addr + 8n, -1), -1, 'a negative length');
  assert.throws(
    () => domain.register(new Uint8Array(8), 8),
    (e: unknown) => isTandemError(e, 'FABRIC_INVALID_REQUEST'),
  );
});
