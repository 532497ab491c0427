// `tandem bench cluster` in real node processes on 127.0.0.1: the single-node reference and
// the N-node split are loaded side by side and their timed runs alternate; the rows and their
// ratios come from those runs. (Only relations are asserted here: timings belong to benchmarks.)
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { benchCluster } from '../../src/cluster/index.js';
import { makeTestModelFile } from './parallel-models.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-bench-cluster-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test(
  'bench cluster: one row per configuration, speedups are their ratios, runs alternate',
  { timeout: 120_000 },
  async () => {
    const model = await makeTestModelFile(dir, 'llama', 'llama', 'f32');
    const lines: string[] = [];
    const rows = await benchCluster({
      model,
      nodes: 2,
      parallel: 'tp',
      provider: 'tcp',
      promptTokens: 8,
      tokens: 4,
      repeat: 2,
      wire: 'f16',
      agreementSteps: 6,
      onProgress: (l) => lines.push(l),
    });
    assert.equal(rows.length, 2);
    const [one, two] = rows as [(typeof rows)[0], (typeof rows)[0]];
    assert.deepEqual([one.nodes, two.nodes], [1, 2]);
    assert.deepEqual([one.wire, two.wire], ['f32', 'f16']);
    for (const r of rows) {
      assert.ok(
        r.decode_tok_s > 0 && r.prefill_tok_s > 0 && r.ttft_ms > 0,
        `row ${r.nodes}: ${JSON.stringify(r)}`,
      );
      assert.ok(r.comm_share >= 0 && r.comm_share <= 1);
    }
    assert.equal(one.comm_share, 0);
    assert.equal(one.wire_bytes_per_token, 0);
    assert.ok(two.wire_bytes_per_token > 0, 'the split sends activations every token');
    assert.equal(two.speedup_decode, two.decode_tok_s / one.decode_tok_s);
    assert.equal(two.speedup_ttft, one.ttft_ms / two.ttft_ms);
    assert.equal(one.agreement, undefined);
    assert.ok(two.agreement !== undefined && two.agreement >= 0 && two.agreement <= 1);
    // the N-node row says whether its timed runs generated one node's tokens (f16 wire: either)
    assert.equal(one.same_tokens, undefined);
    assert.equal(typeof two.same_tokens, 'boolean');
    // tensor parallel: the memory ceiling, from rounds alternated after the timed runs
    assert.equal(one.decode_ceiling, undefined);
    assert.ok(
      two.decode_ceiling !== undefined && Number.isFinite(two.decode_ceiling) && two.decode_ceiling > 0,
      JSON.stringify(two),
    );
    const ceilingRounds = lines.filter((l) => l.startsWith('memory ceiling'));
    assert.equal(ceilingRounds.length, 2, lines.join('\n'));
    assert.ok(
      lines.indexOf(ceilingRounds[0]!) > lines.findIndex((l) => l.startsWith('run 2 of 2')),
      lines.join('\n'),
    );
    // both configurations were loaded before the first timed run, and the timed runs alternate
    const firstRun = lines.findIndex((l) => l.startsWith('run 1 of 2'));
    assert.ok(firstRun > 0, lines.join('\n'));
    assert.equal(lines.filter((l, i) => i < firstRun && l.startsWith('loading')).length, 2, lines.join('\n'));
    assert.ok(
      lines.some((l) => l.startsWith('run 2 of 2')),
      lines.join('\n'),
    );
  },
);

test(
  "bench cluster: agreement teacher-forced on a given text compares both runs' picks, not the text",
  { timeout: 120_000 },
  async () => {
    const model = await makeTestModelFile(dir, 'llama', 'llama', 'f32');
    // ids the random model would not predict: compared with the text itself, agreement would be ~0
    const text = Array.from({ length: 40 }, (_, i) => 3 + ((i * 37) % 200));
    const base = {
      model,
      nodes: 2,
      parallel: 'tp' as const,
      provider: 'shm' as const,
      promptTokens: 8,
      tokens: 2,
      repeat: 1,
      ceiling: false,
    };
    await assert.rejects(
      benchCluster({ ...base, agreementSteps: 33, agreementText: text }),
      (e: Error & { code?: string }) => e.code === 'INVALID_ARGUMENT' && /40 tokens.*need 41/.test(e.message),
    );
    const lines: string[] = [];
    const rows = await benchCluster({
      ...base,
      agreementSteps: 32,
      agreementText: text,
      onProgress: (l) => lines.push(l),
    });
    // the f32 wire gives one node's sums bit for bit, so every pick agrees
    assert.equal(rows[1]?.agreement, 1, JSON.stringify(rows[1]));
    assert.ok(
      lines.some((l) => l.includes('on the given text')),
      lines.join('\n'),
    );
  },
);

test(
  'bench cluster checks the model path before any node starts; --hosts needs N + 1 nodes and the secret',
  { timeout: 60_000 },
  async () => {
    const lines: string[] = [];
    const base = {
      nodes: 2,
      parallel: 'tp' as const,
      provider: 'tcp' as const,
      onProgress: (l: string) => lines.push(l),
    };
    await assert.rejects(
      benchCluster({ ...base, model: join(dir, 'nope.gguf') }),
      (e: Error & { code?: string }) =>
        e.code === 'MODEL_FORMAT_NOT_FOUND' && e.message.includes('nope.gguf'),
    );
    assert.deepEqual(lines, [], 'no node was started');
    const model = await makeTestModelFile(dir, 'llama', 'llama', 'f32');
    const hosts = [{ address: '127.0.0.1:1' }, { address: '127.0.0.1:2' }];
    await assert.rejects(
      benchCluster({ ...base, model, hosts, secret: 'x'.repeat(16) }),
      (e: Error & { code?: string }) =>
        e.code === 'CLUSTER_BAD_HOSTFILE' && /needs 3 hosts.*lists 2/.test(e.message),
    );
    await assert.rejects(
      benchCluster({ ...base, model, hosts: [...hosts, { address: '127.0.0.1:3' }] }),
      (e: Error & { code?: string }) => e.code === 'CLI_USAGE' && /needs the cluster secret/.test(e.message),
    );
  },
);
