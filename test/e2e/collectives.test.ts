import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { ProviderName } from '../../src/fabric/index.js';
import type { TopologyKind } from '../../src/collectives/graph.js';
import type { WorkerCase, WorkerConfig } from './collectives-worker.js';

/**
 * Collectives in real processes over shm and tcp (the full matrix runs in-process on
 * loopback: src/collectives/communicator.test.ts). A cross-section (every op, every dtype,
 * every algorithm, the awkward counts) on worlds of 1 to 8 processes, every topology on both
 * providers, and a rank killed mid-operation. Worlds of 7 and 8 processes on a 2-core host
 * never spin (they yield), so they run the small counts only; 1,000,003 runs on worlds of 1-5.
 */

const worker = join(import.meta.dirname, 'collectives-worker.ts');

interface Rank {
  child: ChildProcess;
  lines: string[];
  waitFor(prefix: string, ms: number): Promise<string>;
  exited: Promise<number | null>;
}

function spawnRank(config: Omit<WorkerConfig, 'address'> & { address?: string }): Rank {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', worker, JSON.stringify({ address: '127.0.0.1:0', ...config })],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines: string[] = [];
  const listeners = new Set<() => void>();
  let buf = '';
  child.stdout?.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
    for (const l of [...listeners]) l();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitFor = (prefix: string, ms: number): Promise<string> =>
    new Promise((resolve, reject) => {
      const look = (): boolean => {
        const line = lines.find((l) => l.startsWith(prefix));
        if (line === undefined) return false;
        clearTimeout(timer);
        listeners.delete(probe);
        resolve(line.slice(prefix.length).trim());
        return true;
      };
      const probe = (): void => void look();
      const timer = setTimeout(() => {
        listeners.delete(probe);
        reject(
          new Error(
            `rank ${config.rank}: no '${prefix}' within ${ms} ms; output so far:\n${lines.join('\n')}`,
          ),
        );
      }, ms);
      if (!look()) listeners.add(probe);
    });
  return { child, lines, waitFor, exited };
}

async function startWorld(
  size: number,
  provider: ProviderName,
  graph: TopologyKind,
  cases: WorkerCase[],
  mode: WorkerConfig['mode'] = 'cases',
  wires = 1,
): Promise<Rank[]> {
  const root = spawnRank({ rank: 0, size, provider, graph, cases, mode, wires });
  if (size === 1) return [root]; // a world of one connects to nobody, so it never listens
  const address = await root.waitFor('LISTENING', 60_000);
  const rest = Array.from({ length: size - 1 }, (_, i) =>
    spawnRank({ rank: i + 1, size, provider, graph, cases, mode, address, wires }),
  );
  return [root, ...rest];
}

function results(r: Rank): { i: number; ok: boolean; out?: string; error?: string }[] {
  return r.lines
    .filter((l) => l.startsWith('RESULT '))
    .map((l) => JSON.parse(l.slice(7)) as { i: number; ok: boolean; out?: string; error?: string });
}

async function runWorld(
  size: number,
  provider: ProviderName,
  graph: TopologyKind,
  cases: WorkerCase[],
  wires = 1,
): Promise<void> {
  const ranks = await startWorld(size, provider, graph, cases, 'cases', wires);
  try {
    const done = await Promise.all(ranks.map((r) => r.waitFor('DONE', 150_000))).catch((e: Error) => {
      const state = ranks
        .map((r, i) => `rank ${i}: ${results(r).length} results, last line '${r.lines.at(-1) ?? ''}'`)
        .join('\n');
      throw new Error(`${e.message.split('\n')[0]}\n${state}`);
    });
    // close() must not wait out the worker's timeoutMs (10 s): a goodbye from a rank that
    // finished close()'s barrier used to cut its neighbours off from relaying through it, so
    // a rank beyond the relay waited the whole timeout (ring, line, star). The bound is that
    // timeout's half, far above the 1-100 ms a close takes: a hang, not a speed, fails it.
    const closeMs = done.map((d) => (JSON.parse(d) as { closeMs: number }).closeMs);
    process.stdout.write(
      `# ${provider} ${graph} x${size}: slowest close() ${Math.max(...closeMs)} ms (rank ${closeMs.indexOf(Math.max(...closeMs))})\n`,
    );
    for (const [rank, ms] of closeMs.entries())
      assert.ok(
        ms < 5000,
        `${provider} ${graph} x${size}: rank ${rank}'s close() took ${ms} ms (timeoutMs 10000)`,
      );
    const all = ranks.map(results);
    for (const [rank, res] of all.entries())
      assert.equal(
        res.length,
        cases.length,
        `${provider} ${graph} x${size}: rank ${rank} reported every case`,
      );
    cases.forEach((k, i) => {
      const what = `${provider} ${graph} x${size} ${JSON.stringify(k)}`;
      for (const [rank, res] of all.entries())
        assert.ok(res[i]?.ok, `${what}: rank ${rank}: ${res[i]?.error ?? 'no result'}`);
      if (k.op === 'all-reduce' || k.op === 'all-gather' || k.op === 'broadcast') {
        for (const res of all)
          assert.equal(res[i]?.out, all[0]?.[i]?.out, `${what}: every rank bit-identical`);
      }
    });
  } finally {
    for (const r of ranks) r.child.kill('SIGKILL');
  }
}

const dtypes = ['f32', 'f16', 'bf16', 'i32'] as const;
const algorithms = ['mesh', 'ring', 'rhd', 'tree'] as const;

/**
 * Every op, dtype, reduction and algorithm, counts 0, 1, 7 and 4096, plus 1,000,003 when
 * `big`. Broadcasts come from the last rank: the far end of a line, a leaf of a star.
 */
function crossSection(size: number, big: boolean): WorkerCase[] {
  const cases: WorkerCase[] = [];
  for (const count of [0, 1, 7, 4096])
    for (const dtype of dtypes)
      cases.push({
        op: 'all-reduce',
        dtype,
        count,
        reduce: count === 7 ? 'max' : count === 1 ? 'mean' : 'sum',
      });
  for (const algorithm of algorithms) {
    cases.push({ op: 'all-reduce', dtype: 'f32', count: 4096, reduce: 'min', algorithm });
    cases.push({ op: 'all-gather', dtype: 'bf16', count: 7, algorithm });
    cases.push({ op: 'reduce-scatter', dtype: 'i32', count: 4096, reduce: 'sum', algorithm });
    cases.push({ op: 'broadcast', dtype: 'f16', count: 4096, root: size - 1, algorithm });
  }
  cases.push({ op: 'all-to-all', count: 100 }, { op: 'barrier' }, { op: 'split' });
  if (big)
    cases.push(
      { op: 'all-reduce', dtype: 'f32', count: 1_000_003, reduce: 'sum', algorithm: 'ring' },
      { op: 'all-reduce', dtype: 'f32', count: 1_000_003, reduce: 'sum' },
    );
  return cases;
}

test(
  'shm, 1 process: a world of one, every op the identity or a copy, counts 0..1,000,003',
  { timeout: 180_000 },
  () => runWorld(1, 'shm', 'mesh', crossSection(1, true)),
);
test(
  'tcp, 1 process: a world of one, every op the identity or a copy, counts 0..1,000,003',
  { timeout: 180_000 },
  () => runWorld(1, 'tcp', 'mesh', crossSection(1, true)),
);
test(
  'shm, 2 processes, full mesh: every dtype, op and algorithm, counts 0..1,000,003',
  { timeout: 180_000 },
  () => runWorld(2, 'shm', 'mesh', crossSection(2, true)),
);
test(
  'tcp, 3 processes, line (the ends talk through the middle), 2 wires per link',
  { timeout: 180_000 },
  () => runWorld(3, 'tcp', 'line', crossSection(3, true), 2),
);
test('shm, 4 processes, ring of links', { timeout: 180_000 }, () =>
  runWorld(4, 'shm', 'ring', crossSection(4, false)),
);
test('tcp, 4 processes, star through rank 0', { timeout: 180_000 }, () =>
  runWorld(4, 'tcp', 'star', crossSection(4, false)),
);
test('shm, 5 processes, line (up to 4 hops), counts 0..1,000,003', { timeout: 180_000 }, () =>
  runWorld(5, 'shm', 'line', crossSection(5, true)),
);
test('tcp, 6 processes, ring of links', { timeout: 180_000 }, () =>
  runWorld(6, 'tcp', 'ring', crossSection(6, false)),
);
test('shm, 7 processes, star through rank 0', { timeout: 180_000 }, () =>
  runWorld(7, 'shm', 'star', crossSection(7, false)),
);
test('tcp, 8 processes, full mesh', { timeout: 180_000 }, () =>
  runWorld(8, 'tcp', 'mesh', crossSection(8, false)),
);

async function killMidOperation(provider: ProviderName, size: number, victim: number): Promise<void> {
  const ranks = await startWorld(size, provider, 'mesh', [{ op: 'barrier' }], 'loop');
  try {
    await Promise.all(ranks.map((r) => r.waitFor('READY', 120_000)));
    await new Promise((r) => setTimeout(r, 200));
    const killedAt = Date.now();
    ranks[victim]!.child.kill('SIGKILL');
    for (const [rank, r] of ranks.entries()) {
      if (rank === victim) continue;
      const failed = JSON.parse(await r.waitFor('FAILED', 10_000)) as {
        code: string;
        rank: number;
        message: string;
        at: number;
      };
      assert.equal(failed.code, 'COLL_PEER_LOST', `rank ${rank}: ${failed.message}`);
      assert.equal(failed.rank, victim, `rank ${rank} names the lost rank: ${failed.message}`);
      const later = JSON.parse(await r.waitFor('LATER', 10_000)) as { code: string; ms: number };
      assert.equal(later.code, 'COLL_ABORTED', 'later calls fail fast');
      process.stdout.write(
        `# ${provider}: rank ${rank} saw the loss after ${failed.at - killedAt} ms; a later call failed in ${later.ms} ms\n`,
      );
      assert.equal(await r.exited, 0);
    }
  } finally {
    for (const r of ranks) r.child.kill('SIGKILL');
  }
}

test(
  'shm: a rank killed with SIGKILL mid all-reduce fails every survivor with COLL_PEER_LOST naming it',
  { timeout: 180_000 },
  () => killMidOperation('shm', 3, 1),
);
test(
  'tcp: a rank killed with SIGKILL mid all-reduce fails every survivor with COLL_PEER_LOST naming it',
  { timeout: 180_000 },
  () => killMidOperation('tcp', 3, 2),
);
