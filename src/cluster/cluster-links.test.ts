import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clusterLinks, memberShares } from './cluster-links.js';
import type { NodeFigures } from './node-figures.js';
import type { ControlClient, HeartbeatSample } from './protocol.js';

/*
 * The coordinator's arithmetic over its members' heartbeats: shares over the steps between the
 * last two heartbeats, bytes/s from their difference, figures of another placement ignored, a
 * lost end making a link down.
 */

function figures(rank: number, sent: number, computeMs: number, commMs: number): NodeFigures {
  return {
    rank,
    links: [{ peer: 1 - rank, sent, received: sent / 2, latencyUs: 20, bandwidthMBps: 900 }],
    computeMs,
    commMs,
  };
}

function sample(atMs: number, f: NodeFigures | undefined, control: number): HeartbeatSample {
  return { atMs, figures: f, controlSent: control, controlReceived: control };
}

/** The fields of a ControlClient these functions read. */
function client(
  label: string,
  prev: HeartbeatSample | undefined,
  cur: HeartbeatSample,
  lost = false,
): ControlClient {
  return {
    label,
    lostWith: lost ? new Error('lost') : undefined,
    previousHeartbeat: prev,
    heartbeat: cur,
    bestRttMs: 0.5,
    controlBytes: { sent: 700, received: 900 },
  } as unknown as ControlClient;
}

test('shares: over the steps between the last two heartbeats; since the placement when none ran; null before any', () => {
  const busy = client('a', sample(0, figures(0, 0, 100, 100), 0), sample(1000, figures(0, 0, 130, 110), 0));
  assert.deepEqual(memberShares(busy, 0), { compute_share: 0.75, comm_share: 0.25 });
  const idle = client('a', sample(0, figures(0, 0, 60, 20), 0), sample(1000, figures(0, 0, 60, 20), 0));
  assert.deepEqual(memberShares(idle, 0), { compute_share: 0.75, comm_share: 0.25 });
  const fresh = client('a', sample(0, undefined, 0), sample(1000, figures(0, 0, 0, 0), 0));
  assert.deepEqual(memberShares(fresh, 0), { compute_share: null, comm_share: null });
  assert.deepEqual(
    memberShares(busy, 1),
    { compute_share: null, comm_share: null },
    'figures of another rank',
  );
  assert.deepEqual(memberShares(busy, undefined), { compute_share: null, comm_share: null });
});

test('links: control links, then each direction between placed members, with bytes/s from the last two heartbeats', () => {
  const a = client('a', sample(0, figures(0, 1000, 0, 0), 100), sample(2000, figures(0, 5000, 0, 0), 300));
  const b = client(
    'b',
    sample(0, figures(1, 2000, 0, 0), 100),
    sample(1000, figures(1, 2000, 0, 0), 100),
    true,
  );
  const links = clusterLinks(
    [
      { id: 'a', client: a, state: 'alive' },
      { id: 'b', client: b, state: 'dead' },
    ],
    [a, b],
    'tcp',
  );
  assert.deepEqual(links, [
    {
      from: 'coordinator',
      to: 'a',
      kind: 'control',
      latency_us: 250,
      bandwidth_MBps: null,
      bytes_sent: 700,
      bytes_received: 900,
      // (300 + 300) - (100 + 100) bytes over 2 s
      bytes_per_s: 200,
      state: 'up',
    },
    {
      from: 'coordinator',
      to: 'b',
      kind: 'control',
      latency_us: 250,
      bandwidth_MBps: null,
      bytes_sent: 700,
      bytes_received: 900,
      bytes_per_s: 0,
      state: 'down',
    },
    {
      from: 'a',
      to: 'b',
      kind: 'tcp',
      latency_us: 20,
      bandwidth_MBps: 900,
      bytes_sent: 5000,
      bytes_received: 2500,
      // (5000 + 2500) - (1000 + 500) bytes over 2 s
      bytes_per_s: 3000,
      state: 'down',
    },
    {
      from: 'b',
      to: 'a',
      kind: 'tcp',
      latency_us: 20,
      bandwidth_MBps: 900,
      bytes_sent: 2000,
      bytes_received: 1000,
      bytes_per_s: 0,
      state: 'down',
    },
  ]);
  // figures of another placement (b reports rank 1, placed now at rank 0) are not shown
  assert.equal(clusterLinks([], [b, a], 'tcp').length, 0);
});
