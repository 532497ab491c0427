import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { DashboardSnapshot } from '../../api/dashboard-snapshot.js';
import { renderTop, table } from './top-render.js';

const snapshot: DashboardSnapshot = {
  at_ms: Date.UTC(2026, 10, 28, 13, 4, 5),
  status: 'ready',
  model: 'llama',
  generated_tokens_total: 110,
  prompt_tokens_total: 30,
  tokens_per_s: 7.25,
  rate_window_s: 5,
  recent_ttfts: [],
  queue_depth: 3,
  running: 2,
  slots: 2,
  cluster: {
    members: [
      {
        id: 'mac-a',
        address: '10.0.0.1:7100',
        pid: 11,
        state: 'alive',
        memory_bytes: 3 * 2 ** 30,
        speed: 1.25,
        last_heartbeat_ms: 420,
        compute_share: 0.7,
        comm_share: 0.3,
      },
      {
        id: 'mac-b',
        address: '10.0.0.2:7100',
        pid: 12,
        state: 'dead',
        memory_bytes: null,
        speed: null,
        last_heartbeat_ms: 4100,
        compute_share: null,
        comm_share: null,
      },
    ],
    links: [
      {
        from: 'coordinator',
        to: 'mac-a',
        kind: 'control',
        latency_us: 310,
        bandwidth_MBps: null,
        bytes_sent: 2048,
        bytes_received: 512,
        bytes_per_s: 230,
        state: 'up',
      },
      {
        from: 'mac-a',
        to: 'mac-b',
        kind: 'rdma',
        latency_us: 8.4,
        bandwidth_MBps: 6400,
        bytes_sent: 5 * 2 ** 20,
        bytes_received: 5 * 2 ** 20,
        bytes_per_s: 41_500_000,
        state: 'down',
      },
    ],
    placement: {
      parallel: 'tp',
      provider: 'rdma',
      reason: null,
      ranks: [{ id: 'mac-a', holds: 'rank 0: layers 0-3' }],
    },
    waiting: null,
    placements: 2,
    replacements: 1,
    replan: null,
    events: [{ kind: 'lost', atMs: Date.UTC(2026, 10, 28, 13, 4, 1), message: 'mac-b lost' }],
  },
};

test('top: one snapshot as text: the figures line, placement, members, links and events', () => {
  const text = renderTop(snapshot, { url: 'http://h:8080' });
  const lines = text.split('\n');
  assert.equal(lines[0], 'tandem top · http://h:8080 · llama · ready · 13:04:05 UTC');
  assert.equal(lines[1], '7.3 tok/s (last 5 s) · 2/2 running · 3 waiting · 110 tokens generated, 30 prompt');
  assert.ok(lines.includes('placement: tp over rdma · placements 2 · re-placements 1'));
  assert.ok(lines.includes('  mac-a: rank 0: layers 0-3'));
  const a = lines.find((l) => l.startsWith('  mac-a  ')) as string;
  assert.match(a, /^ {2}mac-a +alive +3\.0 GiB +1\.25 +70% +30% +420 ms +10\.0\.0\.1:7100$/);
  assert.match(lines.find((l) => l.startsWith('  mac-b  ')) as string, /dead +- +- +- +- +4100 ms/);
  assert.match(text, /^ {2}coordinator +mac-a +control +310 µs +- +230 B\/s +2\.0 KiB +512 B +up$/m);
  assert.match(text, /^ {2}mac-a +mac-b +rdma +8 µs +6\.4 GB\/s +41\.5 MB\/s +5\.0 MiB +5\.0 MiB +down$/m);
  assert.match(text, /^ {2}13:04:01 lost +mac-b lost$/m);
  assert.ok(
    renderTop(snapshot, { url: 'x', width: 20 })
      .split('\n')
      .every((l) => l.length <= 20),
  );
});

test('top: a server still loading says so instead of the tables', () => {
  const text = renderTop({ ...snapshot, status: 'loading', model: null, cluster: null }, { url: 'u' });
  assert.match(text, /· \(no model yet\) · loading ·/);
  assert.match(text, /the model is loading/);
  assert.doesNotMatch(text, /members/);
});

test('top: columns pad to the widest cell; the last column is not padded', () => {
  assert.deepEqual(table(['A', 'BB'], [['long', 'x']]), ['  A     BB', '  long  x']);
});
