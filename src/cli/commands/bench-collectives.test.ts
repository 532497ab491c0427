import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isTandemError } from '../../errors/index.js';
import { checkSizes, defaultSizes } from './bench-collectives.js';
import { runTandem } from '../testing.js';

const tandem = (...args: string[]) => runTandem(args, { timeoutMs: 30_000 });

test('bench collectives and bench fabric refuse what they cannot run, before starting any rank', () => {
  for (const [args, pattern] of [
    [
      ['bench', 'collectives', '--provider', 'loopback', '--ranks', '2'],
      /loopback connects ranks inside one process only, so it cannot run 2 rank processes/,
    ],
    [['bench', 'collectives', '--sizes', ''], /--sizes is empty/],
    [['bench', 'collectives', '--sizes', '8,,16'], /--sizes has an empty item in '8,,16'/],
    [['bench', 'collectives', '--sizes', '8,6'], /size 6 B is not a whole number of f32 values \(4 B each\)/],
    [
      ['bench', 'collectives', '--op', 'all-gather', '--ranks', '4', '--sizes', '16,8,1K'],
      /size 8 B does not split into whole f32 values over 4 ranks: --op all-gather needs sizes that are multiples of 16 B[^]*hint: use 16 instead of 8/,
    ],
    [
      ['bench', 'collectives', '--op', 'all-to-all', '--ranks', '3', '--sizes', '1M'],
      /size 1048576 B does not split into whole f32 values over 3 ranks: --op all-to-all needs sizes that are multiples of 12 B[^]*hint: use 1048572 or 1048584 instead of 1048576/,
    ],
    [['bench', 'fabric', '--sizes', ''], /--sizes is empty/],
    [
      ['bench', 'collectives', '--op', 'tp-exchange', '--ranks', '1', '--provider', 'tcp'],
      /--op tp-exchange sums parts between ranks, so it needs at least 2, got --ranks 1/,
    ],
    [
      ['bench', 'collectives', '--op', 'tp-exchange', '--algorithm', 'ring'],
      /--op tp-exchange has one algorithm of its own, so --algorithm ring does not apply/,
    ],
  ] as const) {
    const r = tandem(...args);
    assert.equal(r.code, 3, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /CLI_USAGE/);
    assert.match(r.stderr, pattern);
    assert.match(r.stderr, /hint: /);
  }
});

test('bench collectives over loopback runs with one rank', () => {
  const r = tandem(
    'bench',
    'collectives',
    '--provider',
    'loopback',
    '--ranks',
    '1',
    '--sizes',
    '8',
    '--iterations',
    '5',
    '--json',
  );
  assert.equal(r.code, 0, r.stderr);
  assert.equal((JSON.parse(r.stdout) as { bytes: number }).bytes, 8);
});

test('only all-gather and all-to-all need sizes split into whole f32 values per rank; their default sizes are', () => {
  for (const op of ['all-reduce', 'reduce-scatter', 'broadcast'] as const) {
    assert.doesNotThrow(() => checkSizes(op, 3, [4, 8, 1 << 20]));
    assert.deepEqual(
      defaultSizes(op, 3),
      Array.from({ length: 24 }, (_, i) => 8 * 2 ** i),
    );
  }
  assert.doesNotThrow(() => checkSizes('all-gather', 4, [16, 1024, 1 << 20]));
  assert.throws(
    () => checkSizes('all-to-all', 2, [8, 12]),
    (e) => isTandemError(e, 'CLI_USAGE') && e.details.size === 12 && e.details.multipleOf === 8,
  );
  for (const op of ['all-gather', 'all-to-all'] as const) {
    for (const ranks of [1, 2, 3, 4, 6, 64]) {
      const sizes = defaultSizes(op, ranks);
      assert.doesNotThrow(() => checkSizes(op, ranks, sizes), `${op} ${ranks}`);
      assert.equal(sizes.at(-1)! >= 64 << 20, true);
    }
  }
  assert.deepEqual(defaultSizes('all-gather', 4).slice(0, 3), [16, 32, 64]);
  assert.deepEqual(defaultSizes('all-to-all', 3).slice(0, 4), [12, 24, 36, 72]);
});

test(
  'bench collectives --anchors --rounds 2: the goal keeps the best of each, with every round of ours and the anchor below it',
  { timeout: 120_000 },
  () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-anchor-rounds-'));
    try {
      // a stand-in for run-anchors.sh whose Open MPI figure differs by round: 1.2 GB/s, then 2.4 (2 ranks: busbw = algbw = bytes / time)
      const script = join(dir, 'anchors.sh');
      writeFileSync(
        script,
        [
          `n=$(cat ${dir}/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > ${dir}/count`,
          'if [ "$n" = 1 ]; then us=873.81; bw=1.2; else us=436.91; bw=2.4; fi',
          'echo "{\\"anchor\\":\\"openmpi-allreduce\\",\\"btl\\":\\"tcp,self\\",\\"ranks\\":2,\\"bytes\\":1048576,\\"time_us\\":$us,\\"busbw_GBps\\":$bw}"',
        ].join('\n'),
      );
      const r = runTandem(
        [
          'bench',
          'collectives',
          '--ranks',
          '2',
          '--provider',
          'tcp',
          '--sizes',
          '1M',
          '--iterations',
          '60',
          '--anchors',
          '--rounds',
          '2',
        ],
        {
          timeoutMs: 110_000,
          env: { ...process.env, TANDEM_ANCHORS_SCRIPT: script, TANDEM_BENCH_WARMUP_MS: '0' },
        },
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /best of 2 alternated rounds each/);
      const m =
        /busbw >= Open MPI +([\d.]+) +2\.4 +([\d.]+) .*\n {2}by round: ours ([\d.]+), ([\d.]+); anchor 1\.2, 2\.4/.exec(
          r.stdout,
        );
      assert.ok(m, r.stdout);
      const [best, ratio, first, second] = [m[1], m[2], m[3], m[4]].map(Number) as [
        number,
        number,
        number,
        number,
      ];
      assert.equal(best, Math.max(first, second), 'the goal takes the better round of ours');
      assert.equal(ratio, Math.round((best / 2.4) * 100) / 100);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
