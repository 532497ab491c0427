// serve --cluster with members that have no model file: they join, receive their slices, and
// after a member is lost the survivors receive the new slices their re-placement needs; the
// texts stay those of one process with the file.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { startTestServer, until } from '../../src/api/testing.js';
import { tandemBin } from '../../src/cli/testing.js';
import type { ClusterView } from '../../src/cluster/index.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

const secret = 'slices-serve-secret-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'tandem-slices-serve-'));
const root = join(dir, 'member-root');
let path = '';
const members: ChildProcess[] = [];

before(async () => {
  mkdirSync(root);
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
});
after(() => {
  for (const m of members) m.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function member(address: string): ChildProcess {
  const child = spawn(
    process.execPath,
    [tandemBin, 'node', '--join', address, '--threads', '1', '--model-root', root],
    {
      stdio: ['ignore', 'ignore', 'ignore'],
      env: {
        ...process.env,
        TANDEM_SECRET: secret,
        TANDEM_SPEED_PROBE: '0',
        TANDEM_CACHE_DIR: join(dir, 'cache'),
      },
    },
  );
  members.push(child);
  return child;
}

async function complete(url: string, prompt: number[]): Promise<string> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 12, temperature: 0 }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = await res.text();
  assert.equal(res.status, 200, body);
  return (JSON.parse(body) as { choices: { text: string }[] }).choices[0]?.text ?? '';
}

it(
  'members without the file serve, and survivors of a loss get their new slices',
  { timeout: 240_000 },
  async () => {
    const one = await startTestServer(path, { slots: 1 });
    let alone: string;
    try {
      await one.ready;
      alone = await complete(one.url, [...PROMPT]);
    } finally {
      await one.close(0);
    }
    const logs: string[] = [];
    let port = '';
    const server = await ApiServer.start({
      host: '127.0.0.1',
      port: 0,
      maxBodyBytes: 1 << 20,
      slots: 2,
      maxQueue: 8,
      load: () =>
        loadClusterServedModel(path, {
          cluster: '127.0.0.1:0',
          minMembers: 3,
          parallel: 'tp',
          secret,
          log: (line) => logs.push(line),
          onClusterPort: (a) => (port = a),
        }),
    });
    try {
      await until(() => port !== '', 'the cluster port listens');
      const [first] = [member(port), member(port), member(port)];
      await server.ready;
      assert.equal(await complete(server.url, [...PROMPT]), alone);
      assert.equal(logs.filter((l) => /^slices: rank \d received/.test(l)).length, 3, logs.join('\n'));
      const before = logs.length;
      first!.kill('SIGKILL');
      await until(
        async () => {
          const v = (await (await fetch(`${server.url}/v1/cluster`)).json()) as ClusterView;
          return v.placement?.ranks.length === 2;
        },
        'the model is placed on the two survivors',
        30_000,
      );
      assert.equal(await complete(server.url, [...PROMPT]), alone);
      const after = logs.slice(before).filter((l) => /^slices: rank \d received/.test(l));
      assert.equal(after.length, 2, logs.join('\n'));
      // tensor parallel on 2 holds other row ranges than on 3: new slices came over the wire
      assert.ok(
        after.some((l) => !/received 0\.0 MB/.test(l)),
        after.join('\n'),
      );
    } finally {
      await server.close(0);
    }
  },
);
