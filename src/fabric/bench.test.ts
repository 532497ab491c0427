import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkGoals, parseSize, runAnchors, runFabricBench, type BenchRow } from './bench.js';

test('parseSize reads 8, 4K, 4MiB, 64M and refuses nonsense', () => {
  assert.deepEqual(['8', '4K', '4MiB', '64M', '1g'].map(parseSize), [8, 4096, 4 << 20, 64 << 20, 1 << 30]);
  assert.throws(() => parseSize('4X'));
  assert.throws(() => parseSize('0'));
});

test('checkGoals compares with the anchors in the direction of each goal', () => {
  const rows: BenchRow[] = [
    { provider: 'tcp', op: 'latency', bytes: 64, latency_us_p50: 4, latency_us_p99: 9, bandwidth_MBps: null },
    {
      provider: 'tcp',
      op: 'bandwidth',
      bytes: 4 << 20,
      latency_us_p50: null,
      latency_us_p99: null,
      bandwidth_MBps: 5000,
    },
  ];
  const [lat, bw] = checkGoals('tcp', rows, { sockperfLatencyUs: 3.2, iperfBandwidthMBps: 10000, raw: [] });
  assert.deepEqual([lat?.ratio, lat?.met], [1.25, true]);
  assert.deepEqual([bw?.ratio, bw?.met], [0.5, false]);
  assert.equal(checkGoals('shm', rows, { raw: [] })[0]?.met, null);
});

for (const provider of ['tcp', 'shm'] as const) {
  test(
    `bench fabric runs two processes over ${provider} and reports every size`,
    { timeout: 60_000 },
    async () => {
      const rows = await runFabricBench(
        provider,
        { sizes: [8, (4 << 20) + 1], iterations: 2, warmupMs: 0 },
        () => undefined,
      );
      assert.deepEqual(
        rows.map((r) => [r.op, r.bytes]),
        [
          ['latency', 8],
          ['bandwidth', 8],
          ['latency', (4 << 20) + 1],
          ['bandwidth', (4 << 20) + 1],
        ],
      );
      for (const r of rows) {
        if (r.op === 'latency') {
          assert.ok(r.latency_us_p50! > 0 && r.latency_us_p99! >= r.latency_us_p50!, JSON.stringify(r));
          // the await cq.wait() pass is reported beside the busy-poll pass
          assert.ok(
            r.wait_latency_us_p50! > 0 && r.wait_latency_us_p99! >= r.wait_latency_us_p50!,
            JSON.stringify(r),
          );
        } else assert.ok(r.bandwidth_MBps! > 0, JSON.stringify(r));
      }
    },
  );
}

test(
  'runAnchors reads the anchor lines, including figures a tool did not produce',
  { timeout: 20_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-anchors-'));
    try {
      const script = join(dir, 'run-anchors.sh');
      writeFileSync(
        script,
        [
          'echo \'{"anchor":"ucx","transport":"posix,self","latency_us_8B":0.1,"bandwidth_MBps_4MiB":40000}\'',
          'echo \'{"anchor":"ucx","transport":"tcp","latency_us_8B":,"bandwidth_MBps_4MiB":}\'',
          'echo \'{"anchor":"sockperf","transport":"kernel-tcp","latency_us_64B_p50":3.1}\'',
          'echo \'{"anchor":"iperf3","transport":"kernel-tcp","bandwidth_MBps":15700}\'',
        ].join('\n'),
      );
      const a = await runAnchors(script);
      assert.deepEqual(
        [a.ucxShmLatencyUs, a.ucxShmBandwidthMBps, a.sockperfLatencyUs, a.iperfBandwidthMBps],
        [0.1, 40000, 3.1, 15700],
      );
      assert.equal(a.raw.length, 4);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
