// A node killed in the middle of a distributed generation must make the run fail with a typed
// error (never hang), and the surviving node processes must end on their own.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { makeModel } from '../../src/engine/format/make-model.js';
import {
  ClusterSession,
  launchLocalNodes,
  runDistributed,
  type LocalNodes,
} from '../../src/cluster/index.js';
import { isTandemError } from '../../src/errors/index.js';

const tandemBin = new URL('../../bin/tandem.js', import.meta.url).pathname;

// The nodes are `tandem node` processes, so the secret follows the CLI's rule (at least 16 bytes).
const secret = 'cluster-failure-e2e-secret';
const dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-fail-'));
const path = join(dir, 'llama.gguf');
const shape = {
  layers: 4,
  embd: 128,
  ff: 256,
  heads: 4,
  kvHeads: 2,
  headDim: 32,
  vocab: 512,
  context: 256,
  experts: 0,
  expertsUsed: 0,
  expertFf: 0,
  sharedFf: 0,
};
let nodes: LocalNodes | undefined;

before(async () => {
  await makeModel(path, { arch: 'llama', shape, type: 'f32', std: 0.3, seed: 9 });
});

after(async () => {
  await nodes?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function exited(p: ChildProcess, ms: number): Promise<boolean> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

for (const parallel of ['tp', 'pp'] as const) {
  it(
    `${parallel}: killing a node mid-generation fails the run with a typed error and frees the survivors`,
    { timeout: 120_000 },
    async () => {
      nodes = await launchLocalNodes(3, { secret, threads: 1 });
      const session = await ClusterSession.connect(
        nodes.addresses.map((address) => ({ address })),
        secret,
      );
      const victim = nodes.processes[2]!;
      try {
        await session.load({
          model: path,
          parallel,
          provider: 'tcp',
          greedy: true,
          contextLength: 256,
          commTimeoutMs: 20_000,
        });
        let seen = 0;
        const started = Date.now();
        await assert.rejects(
          session.generate({
            prompt: [1, 2, 3, 4],
            maxTokens: 240,
            onToken: () => {
              if (++seen === 2) victim.kill('SIGKILL');
            },
          }),
          (e) => {
            assert.ok(
              isTandemError(e) &&
                ['CLUSTER_NODE_LOST', 'COLL_PEER_LOST', 'COLL_ABORTED', 'PAR_PEER_LOST'].includes(e.code),
              `typed error, got ${String(e)}`,
            );
            return true;
          },
        );
        assert.ok(seen >= 2, 'the run was under way when the node died');
        assert.ok(Date.now() - started < 60_000, 'failed within the bound');
      } finally {
        session.close();
      }
      const survivors = nodes.processes.slice(0, 2);
      const ended = await Promise.all(survivors.map((p) => exited(p, 15_000)));
      assert.deepEqual(ended, [true, true], 'surviving nodes ended once the coordinator left');
      await nodes.stop();
      nodes = undefined;
    },
  );
}

it('a missing node fails fast with a typed error naming it', { timeout: 30_000 }, async () => {
  await assert.rejects(
    runDistributed({
      model: path,
      hosts: [{ address: '127.0.0.1:1' }],
      secret,
      prompt: [1],
      maxTokens: 1,
    }),
    (e) => isTandemError(e, 'CLUSTER_NODE_LOST') && e.message.includes('127.0.0.1:1'),
  );
});

it(
  'a node that cannot open the model fails the load at once, naming the node and the cause',
  { timeout: 60_000 },
  async (t) => {
    // The second node runs in its own mount namespace with an empty tmpfs over the model's folder.
    if (spawnSync('unshare', ['-m', 'true']).status !== 0) {
      t.skip('unshare -m is not available (needs root)');
      return;
    }
    const hiddenDir = join(dir, 'hidden');
    mkdirSync(hiddenDir, { recursive: true });
    const model = join(hiddenDir, 'llama.gguf');
    await makeModel(model, { arch: 'llama', shape, type: 'f32', std: 0.3, seed: 9 });
    const local = await launchLocalNodes(1, { secret, threads: 1 });
    const blind = spawn(
      'unshare',
      [
        '-m',
        'sh',
        '-c',
        `mount -t tmpfs none '${hiddenDir}' && exec '${process.execPath}' '${tandemBin}' node --listen 127.0.0.1:0 --announce --threads 1 --once`,
      ],
      { env: { ...process.env, TANDEM_SECRET: secret }, stdio: ['ignore', 'pipe', 'ignore'] },
    );
    try {
      const address = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error('the namespaced node did not start within 30 s')),
          30_000,
        );
        let out = '';
        blind.stdout!.on('data', (d: Buffer) => {
          out += String(d);
          const m = /listening (\S+)/.exec(out);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        blind.once('exit', () => reject(new Error('the namespaced node exited before listening')));
      });
      const started = Date.now();
      await assert.rejects(
        runDistributed({
          model,
          hosts: [{ address: local.addresses[0]! }, { address }],
          secret,
          prompt: [1, 2],
          maxTokens: 2,
          // with slices (the default) the node would receive the model from the coordinator
          // instead (test/e2e/cluster-slices.test.ts); without them it must open the file
          slices: false,
        }),
        (e) =>
          isTandemError(e, 'MODEL_FORMAT_IO') &&
          e.message.startsWith(`node 1 (${address})`) &&
          e.message.includes('llama.gguf'),
      );
      // Not the communicator's 30 s join timeout: the failure is reported as it happens.
      assert.ok(Date.now() - started < 10_000, `reported within 10 s (took ${Date.now() - started} ms)`);
    } finally {
      blind.kill('SIGKILL');
      await local.stop();
    }
  },
);

it(
  'a local node that dies says how (signal, last log lines) in CLUSTER_NODE_LOST',
  { timeout: 60_000 },
  async () => {
    const local = await launchLocalNodes(2, { secret, threads: 1 });
    try {
      const session = await ClusterSession.connect(
        local.addresses.map((address) => ({ address })),
        secret,
      );
      try {
        local.processes[1]!.kill('SIGKILL');
        const err = await session
          .load({ model: path, parallel: 'tp', provider: 'tcp', greedy: true, contextLength: 64 })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        assert.ok(isTandemError(err, 'CLUSTER_NODE_LOST'), `node lost, got ${String(err)}`);
        const explained = await local.explain(err);
        assert.ok(
          isTandemError(explained, 'CLUSTER_NODE_LOST') &&
            /node 1 .*killed by SIGKILL/.test(explained.message),
          String(explained),
        );
      } finally {
        session.close();
      }
    } finally {
      await local.stop();
    }
  },
);
