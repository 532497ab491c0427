import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClusterSession } from '../../src/cluster/session.js';
import { tandemBin } from '../../src/cli/testing.js';
import { makeTestModelFile } from './parallel-models.js';

/*
 * A coordinator that stops answering (SIGSTOP of `tandem serve --hosts`): each node notices
 * within DEAD_AFTER_MS (3 s), frees what it loaded for it, and waits for the next coordinator
 * without spinning.
 */

const secret = 'coordinator-test-secret-0123456789';
let dir = '';
let path = '';
const children: ChildProcess[] = [];
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-coordinator-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'f32');
});
after(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a process and resolves with the first match of `pattern` in its stderr (within `ms`). */
function start(
  args: string[],
  pattern: RegExp,
  ms: number,
): Promise<[ChildProcess, RegExpMatchArray, () => string]> {
  const child = spawn(process.execPath, [tandemBin, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, TANDEM_SECRET: secret, TANDEM_SPEED_PROBE: '0' },
  });
  children.push(child);
  let text = '';
  child.stderr!.on('data', (d: Buffer) => (text += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${pattern} within ${ms} ms:\n${text}`)), ms);
    const check = (): void => {
      const m = pattern.exec(text);
      if (m) {
        clearTimeout(timer);
        resolve([child, m, () => text]);
      }
    };
    child.stderr!.on('data', check);
    child.once('exit', (code) => reject(new Error(`exited (${code}) before ${pattern}:\n${text}`)));
  });
}

/** CPU seconds (user + system) the process has used. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

it(
  'a stopped coordinator: its nodes end its session within 3 s, free the model, and take the next coordinator',
  { timeout: 120_000 },
  async () => {
    const nodes = await Promise.all(
      [0, 1].map(() =>
        start(['node', '--listen', '127.0.0.1:0', '--threads', '1'], /listening on (\S+)/, 30_000),
      ),
    );
    const hostfile = join(dir, 'hosts.txt');
    writeFileSync(hostfile, nodes.map(([, m]) => `${m[1]}\n`).join(''));
    const [serve, m] = await start(
      ['serve', path, '--hosts', hostfile, '--port', '0', '--threads', '1'],
      /listening on (http:\/\/\S+)/,
      60_000,
    );
    const res = await fetch(`${m[1]}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 4, temperature: 0 }),
    });
    assert.equal(res.status, 200);
    serve.kill('SIGSTOP');
    try {
      const stoppedAt = Date.now();
      const deadline = stoppedAt + 10_000;
      while (!nodes.every(([, , log]) => /the coordinator sent nothing/.test(log())) && Date.now() < deadline)
        await sleep(50);
      const noticedMs = Date.now() - stoppedAt;
      assert.ok(
        nodes.every(([, , log]) => /the coordinator sent nothing/.test(log())),
        'both nodes ended the session',
      );
      assert.ok(noticedMs < 3000 + 1500, `noticed after ${noticedMs} ms`);
      // waiting for the next coordinator costs no CPU
      const pids = nodes.map(([c]) => c.pid as number);
      const before = pids.map(cpuSeconds);
      await sleep(1000);
      const used = pids.map((p, i) => cpuSeconds(p) - (before[i] as number));
      assert.ok(
        used.every((s) => s < 0.2),
        `CPU seconds in 1 s of waiting: ${used.join(', ')}`,
      );
      // and the next coordinator is taken
      const next = await ClusterSession.connect(
        nodes.map(([, mm]) => ({ address: mm[1] as string })),
        secret,
        10_000,
      );
      next.close();
    } finally {
      serve.kill('SIGKILL');
    }
  },
);
