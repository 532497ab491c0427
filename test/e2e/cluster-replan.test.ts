import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { until } from '../../src/api/testing.js';
import type { ClusterView } from '../../src/cluster/index.js';
import { tandemBin } from '../../src/cli/testing.js';
import { makePoolingModel, PROMPT } from './parallel-models.js';

/*
 * The join re-plan margin, both sides: a member that joins is placed at the next step only
 * when the cost model predicts the placement on every member decodes faster by the margin
 * (REPLAN_MARGIN). Alike members on a model whose weights outweigh the collectives' latency:
 * tensor parallel on 3 beats it on 2, so it re-plans. A third member a quarter as fast
 * (--speed): every split on 3 waits on it, so the model stays on 2 and the member waits,
 * alive and unplaced. /v1/cluster says which and why, with the predictions.
 */

const secret = 'replan-test-secret-0123456789abcd';
let dir = '';
let path = '';
const members: ChildProcess[] = [];
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-replan-'));
  path = (await makePoolingModel(dir)).path;
});
after(() => {
  for (const m of members) m.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function member(address: string, speed?: number): ChildProcess {
  const extra = speed !== undefined ? ['--speed', String(speed)] : [];
  const child = spawn(process.execPath, [tandemBin, 'node', '--join', address, '--threads', '1', ...extra], {
    stdio: ['ignore', 'ignore', 'ignore'],
    env: { ...process.env, TANDEM_SECRET: secret, TANDEM_SPEED_PROBE: '0' },
  });
  members.push(child);
  return child;
}

async function view(url: string): Promise<ClusterView> {
  return (await (await fetch(`${url}/v1/cluster`)).json()) as ClusterView;
}

async function complete(url: string): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: 4, temperature: 0 }),
    signal: AbortSignal.timeout(60_000),
  });
  await res.text();
  return res.status;
}

/** Serves on two members of `speed`, lets a third of `third` join; returns the view after a request. */
async function joinThird(speed: number | undefined, third: number | undefined): Promise<ClusterView> {
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
        minMembers: 2,
        secret,
        discoveryPort: 0,
        onClusterPort: (a) => (port = a),
      }),
  });
  try {
    await until(() => port !== '', 'the cluster port listens');
    member(port, speed);
    member(port, speed);
    await server.ready;
    assert.equal((await view(server.url)).replan, null, 'no join to a placed model yet');
    member(port, third);
    await until(async () => (await view(server.url)).replan !== null, 'the join is judged', 60_000);
    assert.equal(await complete(server.url), 200);
    return await view(server.url);
  } finally {
    await server.close(0);
    for (const m of members.splice(0)) m.kill('SIGKILL');
  }
}

describe('the join re-plan margin', { timeout: 240_000 }, () => {
  it('a join predicted to pay by the margin re-plans at the next step', async () => {
    const v = await joinThird(undefined, undefined);
    assert.match(
      v.replan ?? '',
      /^re-plan at the next step: predicted decode \d+ tok\/s on 3 member\(s\) \(tp\) against \d+ tok\/s now on 2 \(tp\): \+\d+%, margin 10%$/,
    );
    assert.equal(v.placement?.ranks.length, 3);
    assert.deepEqual(
      v.members.map((m) => m.state),
      ['alive', 'alive', 'alive'],
    );
  });

  it('a join predicted not to pay leaves the placement, and the member waits unplaced', async () => {
    const v = await joinThird(4, 1);
    assert.match(
      v.replan ?? '',
      /^no re-plan: predicted decode \d+ tok\/s on 3 member\(s\) .* -\d+%, margin 10%$/,
    );
    assert.equal(v.placement?.ranks.length, 2);
    assert.deepEqual(
      v.members.map((m) => m.state),
      ['alive', 'alive', 'joining'],
    );
    assert.ok(
      v.events.some((e) => e.kind === 'joined' && /no re-plan: predicted/.test(e.message)),
      'the verdict is logged',
    );
  });
});
