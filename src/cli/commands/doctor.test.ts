import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTandem } from '../testing.js';

const tandem = (env: NodeJS.ProcessEnv, ...args: string[]) =>
  runTandem(args, { env: { ...process.env, ...env } });

test('doctor --reports refuses a report file of the wrong shape by its path and the field', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-doctor-reports-'));
  try {
    // no cluster config: only the reports are read
    const env = { TANDEM_CONFIG: join(dir, 'no-cluster.json') };
    const good = join(dir, 'good.json');
    writeFileSync(
      good,
      JSON.stringify({
        host: 'a',
        platform: 'linux',
        tandemVersion: '0.1.0',
        timeMs: 0,
        interfaces: [],
        rdma: { devices: [] },
        thunderbolt: [],
        notes: [],
      }),
    );
    const missing = join(dir, 'missing-field.json');
    writeFileSync(missing, JSON.stringify({ host: 'b', platform: 'linux' }));
    const array = join(dir, 'array.json');
    writeFileSync(array, '[1, 2]');
    for (const [file, field] of [
      [missing, 'tandemVersion must be a string (it is missing)'],
      [array, 'the report must be an object (got an array)'],
    ] as const) {
      const r = tandem(env, 'doctor', '--mode=tcp', '--reports', `${good},${file}`);
      assert.equal(r.code, 2, r.stderr); // invalid_argument
      assert.equal(r.stdout, '');
      assert.ok(
        r.stderr.startsWith(`error [INVALID_ARGUMENT]: ${file} is not a host report: ${field}\n`),
        r.stderr,
      );
      const json = tandem(env, 'doctor', '--mode=tcp', '--json', '--reports', `${good},${file}`);
      assert.equal(json.code, 2, json.stderr);
      const { error } = JSON.parse(json.stderr) as { error: { code: string; details: { source: string } } };
      assert.equal(error.code, 'INVALID_ARGUMENT');
      assert.equal(error.details.source, file);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
