import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseGid, gidIpv4, mtuBytes, type GidEntry } from './rdma-context.js';
import { formatGid } from './rdma-devinfo.js';

const mapped = (a: number, b: number, c: number, d: number): Uint8Array =>
  new Uint8Array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]);
const linkLocal = new Uint8Array([
  0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x18, 0x81, 0xbf, 0xff, 0xfe, 0xb6, 0xd3, 0x21,
]);

test('rdma gid: the IPv4 inside an IPv4-mapped GID, nothing for others', () => {
  assert.equal(gidIpv4(mapped(10, 77, 0, 1)), '10.77.0.1');
  assert.equal(gidIpv4(linkLocal), undefined);
  assert.equal(formatGid(mapped(10, 77, 0, 1)), '0000:0000:0000:0000:0000:ffff:0a4d:0001');
});

test('rdma gid: RoCE v2 IPv4-mapped GID of the local address first, with the reason', () => {
  const entries: GidEntry[] = [
    { index: 0, gid: linkLocal, type: 'IB/RoCE v1' },
    { index: 1, gid: linkLocal, type: 'RoCE v2' },
    { index: 2, gid: mapped(10, 0, 0, 5), ipv4: '10.0.0.5', type: 'IB/RoCE v1' },
    { index: 3, gid: mapped(10, 0, 0, 5), ipv4: '10.0.0.5', type: 'RoCE v2' },
    { index: 4, gid: mapped(10, 77, 0, 1), ipv4: '10.77.0.1', type: 'RoCE v2' },
  ];
  assert.deepEqual(
    [chooseGid(entries, '10.77.0.1')?.index, chooseGid(entries, '10.77.0.1')?.reason],
    [4, 'RoCE v2 IPv4-mapped GID of 10.77.0.1'],
  );
  const other = chooseGid(entries, '192.168.1.1');
  assert.equal(other?.index, 3);
  assert.match(other?.reason ?? '', /no GID carries 192\.168\.1\.1/);
  assert.equal(chooseGid(entries.slice(0, 2))?.index, 0);
  assert.equal(chooseGid([]), undefined);
});

test('rdma port: verbs MTU enum to bytes', () => {
  assert.deepEqual([1, 3, 5, 0, 6].map(mtuBytes), [256, 1024, 4096, 0, 0]);
});
