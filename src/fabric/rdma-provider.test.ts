import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { openDevice } from './index.js';
import { decodeSetup, encodeSetup } from './rdma-endpoint.js';
import { capabilitiesOf } from './rdma-queue-pair.js';
import { WR_TAG_SHIFT, wrIdHalves } from './rdma-resources.js';
import { verbsProblem } from './rdma-verbs.js';
import { RdmaContext, listDevices } from './rdma-context.js';
import { loadVerbs } from './rdma-verbs.js';

/**
 * The rdma provider's parts that need no device, and its refusal where there is none (this
 * machine: libibverbs without devices). The provider on a device runs in the soft-RoCE guest
 * (test/rdma/rdma-conformance.test.ts, npm run test:rdma).
 */
const verbs = loadVerbs();
const hasDevice = verbs !== undefined && listDevices(verbs).length > 0;

test(
  'rdma: without a verbs device openDevice rejects with FABRIC_PROVIDER_UNAVAILABLE saying why',
  { skip: hasDevice ? 'an RDMA device is present' : false },
  async () => {
    await assert.rejects(openDevice('rdma'), (e: unknown) => {
      assert.ok(isTandemError(e, 'FABRIC_PROVIDER_UNAVAILABLE'), String(e));
      const why = verbsProblem() ?? 'no RDMA device is present';
      assert.ok(e.message.includes(why), `${e.message} names the reason (${why})`);
      assert.match(e.hint ?? '', /tcp|devinfo/);
      return true;
    });
    assert.throws(
      () => RdmaContext.open('nonexistent0'),
      (e: unknown) => isTandemError(e, 'FABRIC_PROVIDER_UNAVAILABLE'),
    );
  },
);

test('rdma: the side-channel setup round-trips and a bad one is a typed error naming the field', () => {
  const gid = new Uint8Array(16).map((_, i) => i * 7);
  const ours = { qpType: 'rc' as const, qpNum: 0x11, psn: 0xabcdef, gid, mtu: 3 };
  const back = decodeSetup(
    JSON.parse(JSON.stringify(encodeSetup(ours))) as Record<string, unknown>,
    'rc',
    'p',
  );
  assert.deepEqual(back, ours);
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ ...encodeSetup(ours), qpType: 'uc' }, /uses UC queue pairs, this side RC/],
    [{ ...encodeSetup(ours), qpType: 'ud' }, /queue pair type ud/],
    [{ ...encodeSetup(ours), qpNum: 0 }, /queue pair number 0/],
    [{ ...encodeSetup(ours), psn: 1 << 24 }, /PSN 16777216/],
    [{ ...encodeSetup(ours), gid: 'ab' }, /GID/],
    [{ ...encodeSetup(ours), mtu: 6 }, /MTU enum 6/],
  ];
  for (const [extra, why] of bad)
    assert.throws(
      () => decodeSetup(extra, 'rc', '10.0.0.2:7000'),
      (e: unknown) =>
        isTandemError(e, 'FABRIC_CONNECT_FAILED') && why.test(e.message) && /10\.0\.0\.2/.test(e.message),
    );
});

test('rdma: RC offers read, UC does not; wr_id carries a 53-bit wrId and the tag above it', () => {
  assert.deepEqual(capabilitiesOf('rc', 64).opcodes, ['send', 'write', 'write_imm', 'read']);
  assert.deepEqual(capabilitiesOf('uc', 0).opcodes, ['send', 'write', 'write_imm']);
  for (const [wrId, tag] of [
    [0, 0],
    [7, 19],
    [2 ** 53 - 1, 2 ** (32 - WR_TAG_SHIFT) - 1],
  ] as const) {
    const [lo, hi] = wrIdHalves(wrId, tag);
    assert.equal((hi & ((1 << WR_TAG_SHIFT) - 1)) * 2 ** 32 + lo, wrId);
    assert.equal(hi >>> WR_TAG_SHIFT, tag);
  }
});
