import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PowermetricsEnergy, parsePowermetrics, powermetricsRefusal } from './powermetrics.js';

/*
 * Written from powermetrics(1)'s documented text output (`--samplers cpu_power`): a header per
 * sample with its interval, then the sampler's section. Apple silicon reports mW per unit and
 * a combined figure; an Intel Mac reports a package estimate in W.
 */
const appleSilicon = `Machine model: Mac15,8
OS version: 24A335

*** Sampled system activity (Thu Nov 28 10:00:00 2026 +0000) (1002.31ms elapsed) ***

**** Processor usage ****

E-Cluster HW active frequency: 1107 MHz
E-Cluster HW active residency:  35.40%
P-Cluster HW active frequency: 3204 MHz
P-Cluster HW active residency:  88.12%

CPU Power: 14250 mW
GPU Power: 320 mW
ANE Power: 0 mW
Combined Power (CPU + GPU + ANE): 14570 mW

*** Sampled system activity (Thu Nov 28 10:00:01 2026 +0000) (998.02ms elapsed) ***

**** Processor usage ****

CPU Power: 2100 mW
GPU Power: 12 mW
ANE Power: 0 mW
Combined Power (CPU + GPU + ANE): 2112 mW

*** Sampled system activity (Thu Nov 28 10:00:02 2026 +0000) (1000.00ms elapsed) ***

**** Processor usage ****

E-Cluster HW active frequency: 9`;

const intelMac = `*** Sampled system activity (Thu Nov 28 10:00:00 2026 +0000) (1000.50ms elapsed) ***

**** Processor usage ****

Intel energy model derived package power (CPUs+GT+SA): 5.43W

`;

test('powermetrics: each complete sample gives its interval and combined watts; a cut-off one is left out', () => {
  assert.deepEqual(parsePowermetrics(appleSilicon), [
    { elapsedMs: 1002.31, watts: 14.57 },
    { elapsedMs: 998.02, watts: 2.112 },
  ]);
});

test("powermetrics: an Intel Mac's package estimate in W", () => {
  assert.deepEqual(parsePowermetrics(intelMac), [{ elapsedMs: 1000.5, watts: 5.43 }]);
});

test('powermetrics: text without samples gives none', () => {
  assert.deepEqual(parsePowermetrics(''), []);
  assert.deepEqual(parsePowermetrics('Machine model: Mac15,8\n'), []);
});

test('powermetrics: the permission failures are recognised, each with what to do', () => {
  assert.match(powermetricsRefusal('powermetrics must be invoked as the superuser\n') ?? '', /needs root/);
  assert.match(powermetricsRefusal('sudo: a password is required\n') ?? '', /NOPASSWD/);
  assert.equal(powermetricsRefusal('some other failure'), undefined);
});

test('powermetrics: streamed in odd chunks, a sample counts once the next one begins', () => {
  const energy = new PowermetricsEnergy();
  const firstTwo = 14.57 * 1.00231 + 2.112 * 0.99802;
  const at = appleSilicon.indexOf('*** Sampled system activity (Thu Nov 28 10:00:01');
  for (let i = 0; i < at; i += 7) energy.push(appleSilicon.slice(i, Math.min(i + 7, at)));
  assert.equal(energy.samples, 0, 'the first sample may still be incomplete');
  for (let i = at; i < appleSilicon.length; i += 13) energy.push(appleSilicon.slice(i, i + 13));
  assert.equal(energy.samples, 2);
  assert.ok(Math.abs(energy.joules - firstTwo) < 1e-9, String(energy.joules));
});
