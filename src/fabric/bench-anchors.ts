/**
 * The reference figures `tandem bench fabric|collectives --anchors` compare with
 * (`<repo>/../shared/anchors/run-anchors.sh`: UCX, sockperf, iperf3, Open MPI), the goals
 * judged against them, and the best-of-rounds rule: the machine's speed drifts by tens of
 * percent between minutes, so ours and the anchor run in alternated rounds and each figure
 * is the best of its rounds (lowest time, highest rate), as a reviewer re-running it gets.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ProviderName } from './index.js';
import type { BenchRow } from './bench.js';

const round = (x: number, digits: number): number => Number(x.toFixed(digits));

/**
 * The anchors script: `TANDEM_ANCHORS_SCRIPT` when set (a checkout outside the usual layout),
 * else `<repo>/../shared/anchors/run-anchors.sh`; undefined when absent.
 */
export function anchorsScript(): string | undefined {
  const path =
    process.env.TANDEM_ANCHORS_SCRIPT ??
    resolve(import.meta.dirname, '..', '..', '..', 'shared', 'anchors', 'run-anchors.sh');
  return existsSync(path) ? path : undefined;
}

export interface Anchors {
  ucxShmLatencyUs?: number | undefined;
  ucxShmBandwidthMBps?: number | undefined;
  sockperfLatencyUs?: number | undefined;
  iperfBandwidthMBps?: number | undefined;
  raw: Record<string, unknown>[];
}

/**
 * Runs one part of `run-anchors.sh` (`fabric`, `allreduce`) and returns its JSON lines; the
 * script prints `"key":,` when a tool produced no figure, read here as null. The script runs
 * in a process group of its own, and a timeout (or this process exiting) kills the whole
 * group: killing bash alone left its mpirun and the spinning MPI ranks running for good,
 * taking the cores from every later round. `args` replaces `[script, part]` (tests).
 */
export async function anchorLines(
  script: string,
  part: string,
  timeoutMs: number,
  args: readonly string[] = [script, part],
): Promise<Record<string, unknown>[]> {
  const out = await new Promise<string>((resolveOut, reject) => {
    const p = spawn('bash', args, { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
    const killGroup = (): void => {
      try {
        if (p.pid !== undefined) process.kill(-p.pid, 'SIGKILL');
      } catch {
        // the group is gone already
      }
    };
    let text = '';
    p.stdout.on('data', (d: Buffer) => (text += d.toString()));
    const timer = setTimeout(killGroup, timeoutMs);
    process.once('exit', killGroup);
    p.on('error', reject);
    p.on('exit', () => {
      clearTimeout(timer);
      process.removeListener('exit', killGroup);
      resolveOut(text);
    });
  });
  const lines: Record<string, unknown>[] = [];
  for (const line of out.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line.replace(/:(?=\s*[,}])/g, ':null')) as Record<string, unknown>);
    } catch {
      // not an anchor line
    }
  }
  return lines;
}

/** Runs the anchors script (fabric part) and picks the figures the goals compare with. */
export async function runAnchors(script: string): Promise<Anchors> {
  const a: Anchors = { raw: [] };
  for (const o of await anchorLines(script, 'fabric', 300_000)) {
    a.raw.push(o);
    const num = (k: string): number | undefined => (typeof o[k] === 'number' ? (o[k] as number) : undefined);
    if (o.anchor === 'ucx' && o.transport === 'posix,self') {
      a.ucxShmLatencyUs = num('latency_us_8B');
      a.ucxShmBandwidthMBps = num('bandwidth_MBps_4MiB');
    }
    if (o.anchor === 'sockperf') a.sockperfLatencyUs = num('latency_us_64B_p50');
    if (o.anchor === 'iperf3') a.iperfBandwidthMBps = num('bandwidth_MBps');
  }
  return a;
}

export interface GoalCheck {
  goal: string;
  ours: number | null;
  anchor: number | null;
  ratio: number | null;
  met: boolean | null;
  /** With more than one round: each round's figure, in round order (the best of them is `ours`). */
  ours_rounds?: (number | null)[];
  /** The anchor's figure of each round, in the same order (its round ran just before ours). */
  anchor_rounds?: (number | null)[];
}

/**
 * The best-of-rounds goals with each round's own figures beside them (`perRound[i]`: the goals
 * of round i's rows against round i's anchors, matched by name): a reader then sees how far the
 * machine moved both sides between rounds, not only the best draw of each.
 */
export function withRounds(
  best: readonly GoalCheck[],
  perRound: readonly (readonly GoalCheck[])[],
): GoalCheck[] {
  if (perRound.length < 2) return best.map((g) => ({ ...g }));
  return best.map((g) => {
    const mine = perRound.map((r) => r.find((x) => x.goal === g.goal));
    return {
      ...g,
      ours_rounds: mine.map((x) => x?.ours ?? null),
      anchor_rounds: mine.map((x) => x?.anchor ?? null),
    };
  });
}

/**
 * One goal: `ours` against the anchor's figure, met when the ratio is at most `limit`
 * (`lower`: times) or at least it (rates); met is null when either figure is missing.
 */
export function goalCheck(
  name: string,
  ours: number | null,
  anchor: number | undefined | null,
  limit: number,
  lower: boolean,
): GoalCheck {
  const ratio = ours !== null && anchor ? round(ours / anchor, 2) : null;
  return {
    goal: name,
    ours,
    anchor: anchor ?? null,
    ratio,
    met: ratio === null ? null : lower ? ratio <= limit : ratio >= limit,
  };
}

/** The line `--anchors` prints for a goal. */
export function formatGoal(g: GoalCheck): string {
  const verdict = g.met === null ? 'n/a (missing figure)' : g.met ? 'met' : 'NOT met';
  return `goal: ${g.goal}: ours ${g.ours ?? '-'} vs anchor ${g.anchor ?? '-'} (ratio ${g.ratio ?? '-'}): ${verdict}`;
}

/** The goals: shm 8 B latency <= 3x UCX posix, shm 4 MiB bw >= 0.5x UCX; tcp 64 B latency <= 1.5x sockperf, 4 MiB bw >= 0.7x iperf3. */
export function checkGoals(provider: ProviderName, rows: readonly BenchRow[], a: Anchors): GoalCheck[] {
  const lat = (b: number): number | null =>
    rows.find((r) => r.op === 'latency' && r.bytes === b)?.latency_us_p50 ?? null;
  const bw = (b: number): number | null =>
    rows.find((r) => r.op === 'bandwidth' && r.bytes === b)?.bandwidth_MBps ?? null;
  if (provider === 'shm') {
    return [
      goalCheck('shm 8 B latency <= 3x UCX posix', lat(8), a.ucxShmLatencyUs, 3, true),
      goalCheck('shm 4 MiB bandwidth >= 0.5x UCX posix', bw(4 << 20), a.ucxShmBandwidthMBps, 0.5, false),
    ];
  }
  return [
    goalCheck('tcp 64 B latency <= 1.5x sockperf', lat(64), a.sockperfLatencyUs, 1.5, true),
    goalCheck('tcp 4 MiB bandwidth >= 0.7x iperf3', bw(4 << 20), a.iperfBandwidthMBps, 0.7, false),
  ];
}

/** The better of two figures in a measure's direction (null or undefined: the other one). */
function better<T extends number | null | undefined>(a: T, b: T, lower: boolean): T {
  if (a === null || a === undefined) return b;
  if (b === null || b === undefined) return a;
  return (lower ? b < a : b > a) ? b : a;
}

/** Whether a field measures a time (lower is better); rates and bandwidths are higher-better. */
const isTime = (field: string): boolean => /latency|_us|time/.test(field);

/**
 * Rounds of `runFabricBench` merged: per (op, bytes) every measure is the best of the rounds
 * (each latency percentile and bandwidth on its own), in the first round's row order.
 */
export function bestBenchRows(kept: readonly BenchRow[], got: readonly BenchRow[]): BenchRow[] {
  const out = kept.map((r) => ({ ...r }));
  for (const r of got) {
    const k = out.find((o) => o.op === r.op && o.bytes === r.bytes);
    if (k === undefined) {
      out.push({ ...r });
      continue;
    }
    k.latency_us_p50 = better(k.latency_us_p50, r.latency_us_p50, true);
    k.latency_us_p99 = better(k.latency_us_p99, r.latency_us_p99, true);
    k.bandwidth_MBps = better(k.bandwidth_MBps, r.bandwidth_MBps, false);
    if (r.wait_latency_us_p50 !== undefined)
      k.wait_latency_us_p50 = better(k.wait_latency_us_p50 ?? null, r.wait_latency_us_p50, true);
    if (r.wait_latency_us_p99 !== undefined)
      k.wait_latency_us_p99 = better(k.wait_latency_us_p99 ?? null, r.wait_latency_us_p99, true);
  }
  return out;
}

/**
 * Rounds of `runAnchors` merged: per anchor line (anchor and transport), each numeric figure
 * is the best of the rounds, and the picked figures are taken again from the merged lines.
 */
export function bestAnchors(kept: Anchors | undefined, got: Anchors): Anchors {
  const raw = (kept?.raw ?? []).map((o) => ({ ...o }));
  for (const o of got.raw) {
    const k = raw.find((x) => x.anchor === o.anchor && x.transport === o.transport);
    if (k === undefined) {
      raw.push({ ...o });
      continue;
    }
    for (const [field, v] of Object.entries(o)) {
      if (typeof v !== 'number') continue;
      const was = k[field];
      k[field] = better(typeof was === 'number' ? was : null, v, isTime(field));
    }
  }
  return {
    raw,
    ucxShmLatencyUs: better(kept?.ucxShmLatencyUs, got.ucxShmLatencyUs, true),
    ucxShmBandwidthMBps: better(kept?.ucxShmBandwidthMBps, got.ucxShmBandwidthMBps, false),
    sockperfLatencyUs: better(kept?.sockperfLatencyUs, got.sockperfLatencyUs, true),
    iperfBandwidthMBps: better(kept?.iperfBandwidthMBps, got.iperfBandwidthMBps, false),
  };
}

/**
 * The goals as one table: figure, ours, the anchor's, the ratio and the verdict; `rounds` says how
 * they were taken, and a goal with each round's figures (withRounds) gets them on a line below.
 */
export function formatGoalTable(goals: readonly GoalCheck[], rounds: number): string {
  const head = `# goals: best of ${rounds} alternated round${rounds === 1 ? '' : 's'} each, ours and the anchor's`;
  const width = Math.max(4, ...goals.map((g) => g.goal.length));
  const cell = (v: number | null): string => (v === null ? '-' : String(v)).padStart(10);
  const lines = [
    head,
    `${'goal'.padEnd(width)} ${'ours'.padStart(10)} ${'anchor'.padStart(10)} ${'ratio'.padStart(7)}  verdict`,
  ];
  const list = (v: readonly (number | null)[]): string =>
    v.map((x) => (x === null ? '-' : String(x))).join(', ');
  for (const g of goals) {
    const verdict = g.met === null ? 'n/a (missing figure)' : g.met ? 'met' : 'NOT met';
    lines.push(
      `${g.goal.padEnd(width)} ${cell(g.ours)} ${cell(g.anchor)} ${(g.ratio === null ? '-' : g.ratio.toFixed(2)).padStart(7)}  ${verdict}`,
    );
    if (g.ours_rounds && g.anchor_rounds)
      lines.push(`  by round: ours ${list(g.ours_rounds)}; anchor ${list(g.anchor_rounds)}`);
  }
  return lines.join('\n');
}
