import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkRdmaPorts } from '../../src/fabric/rdma-port-check.js';

/**
 * `tandem doctor --mode rdma`'s port check on a real device: a write and a send through the
 * rdma provider arrive intact, on RC and on UC. Runs in the soft-RoCE guest.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;

test('rdma: the doctor port check passes on the device, RC and UC', { skip, timeout: 300_000 }, async () => {
  for (const qpType of ['rc', 'uc'] as const) {
    const checks = await checkRdmaPorts(qpType);
    const mine = checks.find((c) => c.device === device);
    assert.ok(mine, `a check of ${device} among ${checks.map((c) => c.device).join(', ')}`);
    assert.deepEqual([mine.ok, mine.qpType], [true, qpType], mine.detail);
    assert.match(mine.detail, /arrived intact/);
  }
});

test(
  'rdma: a port check that cannot finish in time is a timeout verdict naming its step',
  { skip, timeout: 120_000 },
  async () => {
    // 50 ms: the devices open, but the connection over the side channel cannot complete.
    const [mine] = (await checkRdmaPorts('rc', { deadlineMs: 50 })).filter((c) => c.device === device);
    assert.ok(mine);
    assert.deepEqual([mine.verdict, mine.ok], ['timeout', false], mine.detail);
    assert.match(mine.detail, /^no verdict within 50 ms \(stopped while .+\)$/);
    const again = (await checkRdmaPorts('rc')).find((c) => c.device === device);
    assert.equal(again?.verdict, 'ok', `a later check on the same device still passes: ${again?.detail}`);
  },
);
