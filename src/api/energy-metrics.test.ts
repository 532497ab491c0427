import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { EnergyMetrics } from './energy-metrics.js';

/** A meter whose joules the test sets, on a clock the test steps. */
function rig(): {
  energy: EnergyMetrics;
  registry: Registry;
  set: (s: { joules?: number; tokens?: number; ms?: number }) => void;
  text: () => Promise<string>;
} {
  const state = { joules: 0, tokens: 0, ms: 0 };
  const registry = new Registry();
  const energy = new EnergyMetrics(
    registry,
    () => state.tokens,
    () => state.ms,
  );
  return {
    energy,
    registry,
    set: (s) => Object.assign(state, s),
    text: async () => {
      energy.refresh();
      return registry.metrics();
    },
  };
}

test('energy metrics: joules, watts and J/token over each window; idle windows keep the last J/token', async () => {
  const r = rig();
  let joules = 100;
  r.energy.setProbe({ meter: { source: 'fake meter', joules: () => joules, close: () => {} } });
  try {
    let text = await r.text();
    assert.match(text, /^tandem:power_meter_info\{source="fake meter",reason=""\} 1$/m);
    assert.match(text, /^tandem:energy_joules_total 100$/m);
    assert.doesNotMatch(text, /tandem:power_watts|tandem:energy_per_generated_token_joules/, 'no window yet');

    joules = 130; // 30 J in 2 s while 10 tokens were generated
    r.set({ tokens: 10, ms: 2000 });
    r.energy.sample();
    text = await r.text();
    assert.match(text, /^tandem:power_watts 15$/m);
    assert.match(text, /^tandem:energy_per_generated_token_joules 3$/m);
    assert.match(text, /^tandem:energy_joules_total 130$/m);

    joules = 140; // idle: 10 J in 5 s, no token
    r.set({ ms: 7000 });
    r.energy.sample();
    text = await r.text();
    assert.match(text, /^tandem:power_watts 2$/m);
    assert.match(text, /^tandem:energy_per_generated_token_joules 3$/m);
  } finally {
    r.energy.stop();
  }
});

test('energy metrics: without a meter only the reason is exported', async () => {
  const r = rig();
  r.energy.setProbe({ reason: 'RAPL counters are readable by root only' });
  const text = await r.text();
  assert.match(
    text,
    /^tandem:power_meter_info\{source="",reason="RAPL counters are readable by root only"\} 1$/m,
  );
  assert.doesNotMatch(text, /tandem:energy_joules_total|tandem:power_watts|tandem:energy_per_generated/);
});

test('energy metrics: a meter that fails a read keeps the last figures (the scrape still answers)', async () => {
  const r = rig();
  let fail = false;
  r.energy.setProbe({
    meter: {
      source: 'flaky',
      joules: () => {
        if (fail) throw new Error('EIO');
        return 5;
      },
      close: () => {},
    },
  });
  try {
    assert.match(await r.text(), /^tandem:energy_joules_total 5$/m);
    fail = true;
    assert.match(await r.text(), /^tandem:energy_joules_total 5$/m);
  } finally {
    r.energy.stop();
  }
});
