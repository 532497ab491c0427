import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTandem, tempModel } from '../testing.js';

const model = tempModel('tandem-plan-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 5 });

test('plan --json gives the forecast fields, each machine with its memory and headroom', () => {
  const r = runTandem([
    'plan',
    '--model',
    'llama-3.3-70b',
    '--machines',
    '3x macbook-pro-m4-max:64g',
    '--json',
  ]);
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  for (const k of [
    'fits',
    'placement',
    'ttft_ms',
    'prefill_tok_s',
    'decode_tok_s',
    'range',
    'bottleneck',
    'per_machine',
  ])
    assert.ok(k in j, `no ${k}`);
  assert.equal(j.per_machine.length, 3);
  assert.equal(j.link.id, 'tb5-rdma', 'Thunderbolt 5 Macs default to RDMA');
  assert.ok(j.range.decode_tok_s[0] < j.decode_tok_s && j.decode_tok_s < j.range.decode_tok_s[1]);
  assert.equal(j.cables.length, 3, 'three Macs in a full mesh: three cables');
});

test('plan --sweep prints one forecast per node count', () => {
  const r = runTandem([
    'plan',
    '--model',
    'llama-3.1-8b',
    '--machines',
    'mac-mini-m4-pro',
    '--sweep',
    'nodes=1..3',
    '--json',
  ]);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.map((l) => l.machines.length),
    [1, 2, 3],
  );
});

test('plan --list-models and --list-machines --json print the catalogs; --validate the published cases', () => {
  const models = JSON.parse(runTandem(['plan', '--list-models', '--json']).stdout);
  assert.ok(models.some((m: { id: string }) => m.id === 'deepseek-v3'));
  const machines = JSON.parse(runTandem(['plan', '--list-machines', '--json']).stdout);
  assert.ok(machines.some((m: { id: string }) => m.id === 'raspberry-pi-5'));
  const v = runTandem(['plan', '--validate', '--json']);
  assert.equal(v.code, 0, v.stderr);
  assert.ok(v.stdout.trim().split('\n').length >= 10);
});

test("plan --calibrate measures this machine, then 'this' forecasts a GGUF file; a damaged calibration is a typed error", () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-plan-cache-'));
  try {
    const env = { ...process.env, TANDEM_CACHE_DIR: dir };
    const none = runTandem(['plan', '--model', model(), '--machines', 'this'], { env });
    assert.equal(none.code, 2);
    assert.match(none.stderr, /PAR_NOT_CALIBRATED[\s\S]*--calibrate/);
    const c = runTandem(
      ['plan', '--calibrate', '--threads', '1', '--model', model(), '--machines', 'this', '--json'],
      { env },
    );
    assert.equal(c.code, 0, c.stderr);
    const j = JSON.parse(c.stdout);
    assert.equal(j.fits, true);
    assert.ok(j.decode_tok_s > 0 && j.prefill_tok_s > 0);
    writeFileSync(join(dir, 'plan-calibration.json'), '{"threads": 1');
    const bad = runTandem(['plan', '--model', model(), '--machines', 'this'], { env });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /damaged/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('plan: --quant with a GGUF file and a missing --machines are usage errors', () => {
  for (const args of [
    ['--model', model(), '--machines', 'mac-mini-m4', '--quant', 'q4_0'],
    ['--model', 'llama-3.1-8b'],
  ]) {
    const r = runTandem(['plan', ...args]);
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /CLI_USAGE/);
  }
});
