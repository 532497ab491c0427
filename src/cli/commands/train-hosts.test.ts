import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNode } from '../../cluster/index.js';
import { hashTokens, loadCheckpoint, train, type RunSettings } from '../../engine/train/index.js';
import { MICRO_SHAPE } from '../../engine/train/testing.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { trainOnHosts } from './train-hosts.js';

const tokens = Int32Array.from({ length: 500 }, (_, i) => (i * 5 + (i >> 3)) % 31);
const secret = 'train-hosts-test-secret-0123456789';

function settings(): RunSettings {
  return {
    shapeName: 'micro-test',
    shape: MICRO_SHAPE,
    seed: 4,
    steps: 3,
    batch: 3,
    seq: 10,
    lr: 1e-2,
    warmup: 1,
    minLrRatio: 0.1,
    weightDecay: 0.1,
    clip: 1,
    dataTokens: tokens.length,
    dataHash: hashTokens(tokens),
  };
}

/**
 * Two `tandem node` agents on 127.0.0.1 and a hostfile naming them, for `body`; both closed
 * after. A failure carries the nodes' log lines.
 */
async function withTwoNodes(body: (dir: string, hostfile: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-train-hosts-'));
  const logs: string[] = [];
  const nodes = await Promise.all(
    [1, 2].map((k) =>
      startNode({
        listen: '127.0.0.1:0',
        secret,
        threads: 1,
        probe: false,
        log: (line) => logs.push(`node ${k}: ${line}`),
      }),
    ),
  );
  try {
    const hostfile = join(dir, 'hosts.txt');
    writeFileSync(hostfile, nodes.map((n) => `${n.address}\n`).join(''));
    await body(dir, hostfile);
  } catch (e) {
    if (e instanceof Error) e.message += `\nthe nodes' logs:\n${logs.join('\n')}`;
    throw e;
  } finally {
    await Promise.all(nodes.map((n) => n.close()));
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The largest difference between two runs' final weights is below 1e-4 (sum order only). */
function assertSameWeights(spread: ArrayLike<number>, single: ArrayLike<number>): void {
  let d = 0;
  for (let i = 0; i < single.length; i++)
    d = Math.max(d, Math.abs((spread[i] as number) - (single[i] as number)));
  assert.ok(d < 1e-4, `weights differ by ${d}`);
}

test(
  'train --hosts: rank 0 here and two `tandem node` agents on 127.0.0.1 follow one process up to sum order',
  { timeout: 120_000 },
  async () => {
    await withTwoNodes(async (_dir, hostfile) => {
      const single = await train({ settings: settings(), tokens, gemm: referenceGemm });
      const spread = await trainOnHosts(
        { settings: settings(), tokens, gemm: referenceGemm },
        { hostfile, secret, kernels: 'reference', threads: 1, timeoutMs: 30_000 },
      );
      assert.equal(spread.step, 3);
      for (let i = 0; i < 3; i++)
        assert.ok(Math.abs(spread.curve[i]!.loss - single.curve[i]!.loss) < 1e-5, `update ${i + 1}`);
      assertSameWeights(spread.weights, single.weights);
    });
  },
);

test(
  'train --hosts --resume: the nodes take the checkpoint from rank 0 and the run ends as an uninterrupted one',
  { timeout: 120_000 },
  async () => {
    await withTwoNodes(async (dir, hostfile) => {
      const checkpoint = join(dir, 'run.ckpt');
      const single = await train({ settings: settings(), tokens, gemm: referenceGemm });
      await train({ settings: settings(), tokens, gemm: referenceGemm, checkpoint, stopAfter: 1 });
      const resume = await loadCheckpoint(checkpoint);
      assert.equal(resume.step, 1);
      const spread = await trainOnHosts(
        { settings: settings(), tokens, gemm: referenceGemm, resume },
        { hostfile, secret, kernels: 'reference', threads: 1, timeoutMs: 30_000 },
      );
      assert.equal(spread.step, 3);
      assert.equal(spread.curve.length, 3);
      assert.equal(spread.curve[0]!.loss, single.curve[0]!.loss);
      for (let i = 1; i < 3; i++)
        assert.ok(Math.abs(spread.curve[i]!.loss - single.curve[i]!.loss) < 1e-5, `update ${i + 1}`);
      assertSameWeights(spread.weights, single.weights);
    });
  },
);

test(
  "train --hosts: a node that refuses the run ends it at once, and the error is the node's own",
  { timeout: 60_000 },
  async () => {
    await withTwoNodes(async (_dir, hostfile) => {
      // every node checks the tokens it receives against the run's hash; rank 0 does not
      const wrong = { ...settings(), dataHash: '0000000000000000' };
      const started = Date.now();
      await assert.rejects(
        trainOnHosts(
          { settings: wrong, tokens, gemm: referenceGemm },
          { hostfile, secret, kernels: 'reference', threads: 1, timeoutMs: 30_000 },
        ),
        (e: Error & { code?: string }) =>
          e.code === 'TRAIN_DATA' &&
          /node \d \(127\.0\.0\.1:\d+\): rank \d: the tokens received/.test(e.message),
      );
      // not the 60 s a rank waits for the others to connect
      assert.ok(Date.now() - started < 20_000, `took ${Date.now() - started} ms`);
    });
  },
);

test(
  'train --hosts: a node cut off mid-run stops rank 0 with PAR_TRAIN_NODE_LOST and what the node side said',
  { timeout: 60_000 },
  async () => {
    await withTwoNodes(async (dir, hostfile) => {
      // node 2's control connection runs through a relay that the test cuts after update 2
      const [first, second] = readFileSync(hostfile, 'utf8').trim().split('\n') as [string, string];
      const target = second.split(':');
      const open = new Set<Socket>();
      const relay = createServer((a) => {
        const b = connect(Number(target[1]), target[0]);
        for (const s of [a, b]) {
          open.add(s);
          s.on('error', () => undefined);
        }
        a.pipe(b).pipe(a);
      });
      await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
      const viaRelay = join(dir, 'via-relay.txt');
      writeFileSync(viaRelay, `${first}\n127.0.0.1:${(relay.address() as AddressInfo).port}\n`);
      try {
        await assert.rejects(
          trainOnHosts(
            {
              settings: { ...settings(), steps: 500 },
              tokens,
              gemm: referenceGemm,
              onStep: (l) => {
                if (l.step === 2) for (const s of open) s.destroy();
              },
            },
            { hostfile: viaRelay, secret, kernels: 'reference', threads: 1, timeoutMs: 30_000 },
          ),
          (e: Error & { code?: string }) =>
            e.code === 'PAR_TRAIN_NODE_LOST' &&
            /after update 2/.test(e.message) &&
            /the nodes said: .*node 2 \(127\.0\.0\.1:\d+\) closed its control connection/.test(e.message),
        );
      } finally {
        relay.close();
      }
    });
  },
);
