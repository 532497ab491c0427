/**
 * Runs one `tandem bench ...` command in two checkouts in alternated rounds (before, after,
 * before, after, ...) and prints, per row, the best figure of each build and their ratio.
 * This is how a change that must leave performance unchanged is checked on a VM whose speed
 * drifts: the same command, the same minutes, best of each.
 *
 *   npx tsx bench/compare-builds.ts --before ../wt/before [--after .] [--rounds 3] [--json] \
 *     -- bench collectives --ranks 2 --provider shm --sizes 8,1K,1M
 *
 * The bench command must support `--json` (one object per line). A row's identity is its
 * string fields (op, provider, ...) and its size fields (IDENTITY); its measures are the
 * fields whose names say time or rate (lower is better for times, higher for rates); other
 * numbers (shares, counts that vary by run) are ignored.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export type Row = Record<string, unknown>;
export type Direction = 'lower' | 'higher';

/** Which way a field improves, or undefined when it identifies the row instead of measuring it. */
export function measureDirection(field: string): Direction | undefined {
  if (/(latency|time_us|_ms|_us)/.test(field)) return 'lower';
  if (/(bandwidth|bw|GBps|MBps|tok_s|speedup)/i.test(field)) return 'higher';
  return undefined;
}

/** Numeric fields that name what a row measured rather than what it found. */
const IDENTITY = new Set([
  'bytes',
  'ranks',
  'nodes',
  'size',
  'concurrency',
  'threads',
  'prompt_tokens',
  'tokens',
  'tp',
]);

function rowKey(row: Row): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(row)) {
    const names =
      typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && IDENTITY.has(k));
    if (names && measureDirection(k) === undefined) parts.push(`${k}=${String(v)}`);
  }
  return parts.join(' ');
}

/** Best figure per row key and measure over every round of one build. */
export function bestOf(rounds: readonly (readonly Row[])[]): Map<string, Map<string, number>> {
  const best = new Map<string, Map<string, number>>();
  for (const rows of rounds) {
    for (const row of rows) {
      const key = rowKey(row);
      let measures = best.get(key);
      if (!measures) best.set(key, (measures = new Map()));
      for (const [field, value] of Object.entries(row)) {
        const dir = measureDirection(field);
        if (dir === undefined || typeof value !== 'number' || !Number.isFinite(value)) continue;
        const old = measures.get(field);
        if (old === undefined || (dir === 'lower' ? value < old : value > old)) measures.set(field, value);
      }
    }
  }
  return best;
}

export interface Comparison {
  row: string;
  measure: string;
  before: number;
  after: number;
  /** after / before for rates, before / after for times: above 1 means the change is faster. */
  speedup: number;
}

export function compare(
  before: Map<string, Map<string, number>>,
  after: Map<string, Map<string, number>>,
): Comparison[] {
  const out: Comparison[] = [];
  for (const [row, measures] of after) {
    const old = before.get(row);
    if (!old) continue;
    for (const [measure, a] of measures) {
      const b = old.get(measure);
      if (b === undefined) continue;
      const speedup = measureDirection(measure) === 'lower' ? b / a : a / b;
      out.push({ row, measure, before: b, after: a, speedup });
    }
  }
  return out;
}

function runJson(dir: string, args: readonly string[]): Row[] {
  const r = spawnSync(process.execPath, [join(dir, 'bin/tandem.js'), ...args, '--json'], {
    cwd: dir,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`tandem ${args.join(' ')} failed in ${dir} (exit ${r.status})`);
  return r.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Row);
}

function main(argv: readonly string[]): void {
  const sep = argv.indexOf('--');
  const own = sep < 0 ? argv : argv.slice(0, sep);
  const bench = sep < 0 ? [] : argv.slice(sep + 1);
  const opt = (name: string): string | undefined => {
    const i = own.indexOf(name);
    return i < 0 ? undefined : own[i + 1];
  };
  const beforeDir = opt('--before');
  const afterDir = resolve(opt('--after') ?? '.');
  const rounds = Number(opt('--rounds') ?? 3);
  if (!beforeDir || bench.length === 0 || !Number.isInteger(rounds) || rounds < 1) {
    console.error(
      'usage: npx tsx bench/compare-builds.ts --before DIR [--after DIR] [--rounds N] [--json] -- bench ...',
    );
    process.exit(2);
  }
  for (const d of [beforeDir, afterDir]) {
    if (!existsSync(join(d, 'bin/tandem.js'))) {
      console.error(`compare-builds: ${d} is not a tandem checkout (no bin/tandem.js)`);
      process.exit(2);
    }
  }
  const runs: { before: Row[][]; after: Row[][] } = { before: [], after: [] };
  for (let i = 0; i < rounds; i++) {
    console.error(`round ${i + 1}/${rounds}: before`);
    runs.before.push(runJson(resolve(beforeDir), bench));
    console.error(`round ${i + 1}/${rounds}: after`);
    runs.after.push(runJson(afterDir, bench));
  }
  const result = compare(bestOf(runs.before), bestOf(runs.after));
  if (own.includes('--json')) {
    for (const c of result) console.log(JSON.stringify({ command: bench.join(' '), rounds, ...c }));
    return;
  }
  console.log(`tandem ${bench.join(' ')}: best of ${rounds} alternated rounds each`);
  console.log(
    `${'row'.padEnd(60)} ${'measure'.padEnd(18)} ${'before'.padStart(10)} ${'after'.padStart(10)}  speedup`,
  );
  for (const c of result) {
    console.log(
      `${c.row.padEnd(60)} ${c.measure.padEnd(18)} ${c.before.toPrecision(4).padStart(10)} ${c.after.toPrecision(4).padStart(10)}  ${c.speedup.toFixed(2)}x`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) main(process.argv.slice(2));
