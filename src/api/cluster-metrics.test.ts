import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ClusterView } from '../cluster/index.js';
import { clusterViewSource } from './cluster-metrics.js';

/*
 * A cluster's view as the metrics source reads it: each member's shares when known (left out,
 * not 0, when not), each link with its figures in base units (seconds, bytes per second), the
 * control links under member="coordinator".
 */

const view: ClusterView = {
  members: [
    {
      id: 'a',
      address: 'h:1',
      pid: 1,
      state: 'alive',
      memory_bytes: 100,
      speed: null,
      last_heartbeat_ms: 500,
      compute_share: 0.75,
      comm_share: 0.25,
    },
    {
      id: 'b',
      address: 'h:2',
      pid: 2,
      state: 'joining',
      memory_bytes: null,
      speed: null,
      last_heartbeat_ms: 0,
      compute_share: null,
      comm_share: null,
    },
  ],
  links: [
    {
      from: 'coordinator',
      to: 'a',
      kind: 'control',
      latency_us: 250,
      bandwidth_MBps: null,
      bytes_sent: 10,
      bytes_received: 20,
      bytes_per_s: 5,
      state: 'up',
    },
    {
      from: 'a',
      to: 'b',
      kind: 'shm',
      latency_us: 4,
      bandwidth_MBps: 2500,
      bytes_sent: 3000,
      bytes_received: 4000,
      bytes_per_s: 0,
      state: 'up',
    },
  ],
  placement: null,
  waiting: null,
  placements: 1,
  replacements: 0,
  replan: null,
  events: [],
};

test('cluster view source: shares when known, links in base units, control links from the coordinator', () => {
  const snap = clusterViewSource(() => view).snapshot();
  assert.deepEqual(snap.members, [
    {
      id: 'a',
      state: 'alive',
      memoryLimitBytes: 100,
      heartbeatAgeS: 0.5,
      computeShare: 0.75,
      commShare: 0.25,
    },
    { id: 'b', state: 'joining', heartbeatAgeS: 0 },
  ]);
  assert.deepEqual(snap.links, [
    {
      member: 'coordinator',
      peer: 'a',
      kind: 'control',
      bytesSent: 10,
      bytesReceived: 20,
      latencyS: 0.00025,
    },
    {
      member: 'a',
      peer: 'b',
      kind: 'shm',
      bytesSent: 3000,
      bytesReceived: 4000,
      latencyS: 0.000004,
      bandwidthBytesPerS: 2.5e9,
    },
  ]);
  assert.equal(snap.placements, 1);
});
