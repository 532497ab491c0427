import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openRaplMeter, raplDelta } from './rapl.js';

/** A fake /sys/class/powercap: zones by directory name, with name, energy_uj and max_energy_range_uj. */
function fakePowercap(zones: Record<string, { name: string; energy: number; range: number }>): string {
  const root = mkdtempSync(join(tmpdir(), 'tandem-rapl-'));
  for (const [dir, z] of Object.entries(zones)) setZone(root, dir, z);
  return root;
}

function setZone(root: string, dir: string, z: { name: string; energy: number; range: number }): void {
  mkdirSync(join(root, dir), { recursive: true });
  writeFileSync(join(root, dir, 'name'), `${z.name}\n`);
  writeFileSync(join(root, dir, 'energy_uj'), `${z.energy}\n`);
  writeFileSync(join(root, dir, 'max_energy_range_uj'), `${z.range}\n`);
}

function setEnergy(root: string, dir: string, energy: number): void {
  writeFileSync(join(root, dir, 'energy_uj'), `${energy}\n`);
}

test('raplDelta: plain advance, and one wrap at the range', () => {
  assert.equal(raplDelta(100, 250, 1000), 150);
  assert.equal(raplDelta(900, 50, 1000), 150);
  assert.equal(raplDelta(7, 7, 1000), 0);
});

test('RAPL: sums the packages (not their subzones), across a wraparound', () => {
  const root = fakePowercap({
    'intel-rapl:0': { name: 'package-0', energy: 1_000_000, range: 10_000_000 },
    'intel-rapl:1': { name: 'package-1', energy: 9_500_000, range: 10_000_000 },
    'intel-rapl:0:0': { name: 'core', energy: 123, range: 10_000_000 },
  });
  try {
    const probe = openRaplMeter(root);
    assert.ok(probe.meter, probe.reason);
    assert.equal(probe.meter.source, 'RAPL package-0 + package-1');
    assert.equal(probe.meter.joules(), 0);
    setEnergy(root, 'intel-rapl:0', 3_000_000); // +2 J
    setEnergy(root, 'intel-rapl:1', 500_000); // wrapped: +0.5 J to the top, +0.5 J after 0
    setEnergy(root, 'intel-rapl:0:0', 999_999_999); // a subzone: inside package-0, not added
    assert.equal(probe.meter.joules(), 3);
    setEnergy(root, 'intel-rapl:1', 2_500_000); // +2 J
    assert.equal(probe.meter.joules(), 5);
    assert.equal(probe.meter.joules(), 5, 'an unchanged counter adds nothing');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('RAPL: a psys zone covers the platform and is read alone', () => {
  const root = fakePowercap({
    'intel-rapl:0': { name: 'package-0', energy: 0, range: 1_000_000 },
    'intel-rapl:1': { name: 'psys', energy: 0, range: 1_000_000 },
  });
  try {
    const probe = openRaplMeter(root);
    assert.ok(probe.meter, probe.reason);
    assert.equal(probe.meter.source, 'RAPL psys');
    setEnergy(root, 'intel-rapl:0', 400_000);
    setEnergy(root, 'intel-rapl:1', 700_000);
    assert.equal(probe.meter.joules(), 0.7);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('RAPL: absent with a reason when there is no tree, no zone, or the counters are root-only', () => {
  const missing = openRaplMeter(join(tmpdir(), 'tandem-rapl-does-not-exist'));
  assert.equal(missing.meter, undefined);
  assert.match(missing.reason ?? '', /does not exist/);

  const empty = fakePowercap({});
  try {
    assert.match(openRaplMeter(empty).reason ?? '', /has no intel-rapl zone/);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }

  const root = fakePowercap({ 'intel-rapl:0': { name: 'package-0', energy: 5, range: 100 } });
  try {
    // what a user who is not root meets: the kernel's 0400 energy_uj refuses the read
    const denied = (path: string): string => {
      if (path.endsWith('energy_uj'))
        throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      return readFileSync(path, 'utf8');
    };
    assert.match(openRaplMeter(root, denied).reason ?? '', /readable by root only .*intel-rapl:0\/energy_uj/);
    // the same through the file system where this test does not run as root (root reads a 0000 file)
    chmodSync(join(root, 'intel-rapl:0', 'energy_uj'), 0o000);
    if (process.getuid?.() !== 0) assert.match(openRaplMeter(root).reason ?? '', /readable by root only/);

    chmodSync(join(root, 'intel-rapl:0', 'energy_uj'), 0o644);
    writeFileSync(join(root, 'intel-rapl:0', 'max_energy_range_uj'), 'garbage\n');
    assert.match(openRaplMeter(root).reason ?? '', /does not hold a number/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
