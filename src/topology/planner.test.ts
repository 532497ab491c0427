import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseMachines } from './machines.js';
import { cablesToGraph, planCabling } from './planner.js';
import { classify } from './classify.js';
import { isTandemError } from '../errors/index.js';

function portsUsedOnce(plan: ReturnType<typeof planCabling>): void {
  const used = new Set<string>();
  for (const c of plan.cables) {
    for (const key of [`${c.a}/${c.a_port}`, `${c.b}/${c.b_port}`]) {
      assert.ok(!used.has(key), `port ${key} used twice`);
      used.add(key);
    }
  }
}

test('parses a machine list into uniquely named machines', () => {
  const m = parseMachines('3x macbook-pro-m4-max, 2x mac-studio-m3-ultra, mac-mini-m4-pro');
  assert.deepEqual(
    m.map((x) => x.name),
    [
      'macbook-pro-m4-max-1',
      'macbook-pro-m4-max-2',
      'macbook-pro-m4-max-3',
      'mac-studio-m3-ultra-1',
      'mac-studio-m3-ultra-2',
      'mac-mini-m4-pro',
    ],
  );
  assert.throws(
    () => parseMachines('2x mac-toaster'),
    (e) => isTandemError(e, 'TOPOLOGY_UNKNOWN_MACHINE'),
  );
  assert.throws(
    () => parseMachines('two macs'),
    (e) => isTandemError(e, 'TOPOLOGY_UNKNOWN_MACHINE'),
  );
});

test('four machines with three ports each: a full mesh, port by port', () => {
  const plan = planCabling(parseMachines('4x mac-mini-m4-pro'));
  assert.equal(plan.topology, 'full-mesh');
  assert.equal(plan.full_mesh_possible, true);
  assert.equal(plan.cables.length, 6);
  assert.equal(plan.max_hops, 1);
  portsUsedOnce(plan);
  assert.deepEqual(plan.cables[0], {
    a: 'mac-mini-m4-pro-1',
    a_port: 'rear-1',
    b: 'mac-mini-m4-pro-2',
    b_port: 'rear-1',
  });
  assert.equal(plan.allreduce[0]?.algorithm, 'mesh');
});

test('five machines with three ports: no full mesh, a ring with chords, said plainly', () => {
  const plan = planCabling(parseMachines('3x macbook-pro-m4-max, 2x mac-studio-m3-ultra'));
  assert.equal(plan.full_mesh_possible, false);
  assert.match(plan.full_mesh_reason, /needs 4 Thunderbolt 5 ports on each; macbook-pro-m4-max-1 has 3/);
  assert.equal(plan.topology, 'ring-with-chords');
  portsUsedOnce(plan);
  const graph = cablesToGraph(parseMachines('3x macbook-pro-m4-max, 2x mac-studio-m3-ultra'), plan.cables);
  assert.notEqual(classify(graph).kind, 'disconnected');
  for (const m of plan.machines) assert.ok(m.used <= m.tb5_ports && m.used >= 2, m.name);
  // A plain ring of 5 has 2 hops max; chords must not make it worse.
  assert.ok(plan.max_hops <= 2);
  assert.equal(plan.allreduce[2]?.algorithm, 'ring');
});

test('eight machines with three ports: ring with chords cuts the hops below a ring', () => {
  const plan = planCabling(parseMachines('8x mac-mini-m4-pro'));
  assert.equal(plan.topology, 'ring-with-chords');
  assert.ok(plan.max_hops < 4, `max hops ${plan.max_hops}`);
  portsUsedOnce(plan);
  assert.equal(plan.cables.length, 12);
});

test('machines without Thunderbolt 5 cannot be cabled for RDMA', () => {
  assert.throws(
    () => planCabling(parseMachines('3x mac-mini-m4')),
    (e) => isTandemError(e, 'TOPOLOGY_PLAN_IMPOSSIBLE'),
  );
  assert.equal(planCabling(parseMachines('mac-studio-m3-ultra')).topology, 'single');
});

test('all-reduce estimate: a mesh beats a ring of the same hosts for large messages', () => {
  const mesh = planCabling(parseMachines('4x mac-studio-m3-ultra'));
  const ring = planCabling(parseMachines('8x mac-studio-m3-ultra'));
  assert.notEqual(ring.topology, 'full-mesh');
  assert.equal(mesh.topology, 'full-mesh');
  assert.ok((mesh.allreduce[2]?.micros ?? 0) < (ring.allreduce[2]?.micros ?? 0));
});

test('the estimate follows the link figures given', () => {
  const slow = planCabling(parseMachines('4x mac-mini-m4-pro'), { gbps: 1, hopMicros: 100 });
  const fast = planCabling(parseMachines('4x mac-mini-m4-pro'));
  // mesh: 2 * (alpha + (M/n)/B); for 8 KiB on 4 hosts at 1 GB/s: 2 * (100 + 2048/1000) us
  assert.ok(Math.abs((slow.allreduce[0]?.micros ?? 0) - 2 * (100 + 2.048)) < 1e-9);
  assert.ok((fast.allreduce[0]?.micros ?? 0) < (slow.allreduce[0]?.micros ?? 0));
});
