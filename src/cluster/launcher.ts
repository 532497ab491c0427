import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { isTandemError, TandemError } from '../errors/index.js';
import type { KernelsChoice } from '../kernels/webgpu/index.js';
import { DEFAULT_NODE_START_MS, nodeStartMs } from './cluster-limits.js';

/** The CLI entry point next to this source tree (runs TypeScript through tsx). */
const tandemBin = fileURLToPath(new URL('../../bin/tandem.js', import.meta.url));

export interface LaunchOptions {
  secret: string;
  /** Compute threads per node. */
  threads: number;
  memLimit?: number;
  /** `tandem node --kernels` of every node (webgpu/auto: their shards on this machine's GPU). */
  kernels?: KernelsChoice;
  /** Deadline for every node to report its address (default nodeStartMs(): TANDEM_NODE_START_MS, else 60 s). */
  timeoutMs?: number;
  /** Node processes' stderr goes here (default: ignored unless TANDEM_NODE_LOG is set). */
  log?: (rank: number, line: string) => void;
  /** Exit when the first coordinator session ends (default true). */
  once?: boolean;
  /** The nodes look for the model under this directory (`tandem node --model-root`). */
  modelRoot?: string;
}

export interface LocalNodes {
  addresses: string[];
  processes: ChildProcess[];
  /**
   * Why local node `rank` is gone: its exit code or signal and the last lines it wrote to
   * stderr (waits up to `waitMs` for the exit); undefined while it runs.
   */
  exitCause(rank: number, waitMs?: number): Promise<string | undefined>;
  /**
   * `e` with the cause added when it is CLUSTER_NODE_LOST for one of these nodes (a node
   * that ran out of memory or crashed says why); any other error unchanged.
   */
  explain(e: unknown): Promise<unknown>;
  /** Ends every node process this launcher started (SIGTERM, then SIGKILL after 2 s). */
  stop(): Promise<void>;
}

function waitExit(p: ChildProcess, ms: number): Promise<boolean> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

function startOne(
  rank: number,
  o: LaunchOptions,
): { proc: ChildProcess; address: Promise<string>; stderr: () => string } {
  const args = [tandemBin, 'node', '--listen', '127.0.0.1:0', '--threads', String(o.threads), '--announce'];
  if (o.once ?? true) args.push('--once');
  if (o.memLimit !== undefined) args.push('--mem-limit', String(o.memLimit));
  if (o.kernels) args.push('--kernels', o.kernels);
  if (o.modelRoot !== undefined) args.push('--model-root', o.modelRoot);
  const proc = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Local nodes share one machine: no speed probe (their coordinator treats them as alike).
    env: { ...process.env, TANDEM_SECRET: o.secret, TANDEM_SPEED_PROBE: '0' },
  });
  const timeoutMs = o.timeoutMs ?? DEFAULT_NODE_START_MS;
  let err = '';
  const address = new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(spawnError(rank, `did not report its address within ${timeoutMs} ms`, err)),
      timeoutMs,
    );
    proc.stdout?.setEncoding('utf8');
    proc.stdout?.on('data', (chunk: string) => {
      out += chunk;
      const m = /^listening (\S+)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (chunk: string) => {
      err = (err + chunk).slice(-8192);
      if (o.log) {
        for (const line of chunk.split('\n')) if (line) o.log(rank, line);
      } else if (process.env.TANDEM_NODE_LOG) process.stderr.write(`[node ${rank}] ${chunk}`);
    });
    proc.once('error', (e) => {
      clearTimeout(timer);
      reject(spawnError(rank, e.message, err));
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(spawnError(rank, `exited (${signal ?? code}) before listening`, err));
    });
  });
  return { proc, address, stderr: () => err };
}

function spawnError(rank: number, why: string, stderr: string): TandemError {
  return new TandemError(
    'CLUSTER_SPAWN',
    `local node ${rank} ${why}${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`,
    {
      hint: 'run `tandem node --listen 127.0.0.1:0` by hand to see why it fails',
      details: { rank },
    },
  );
}

/**
 * The line that starts `n` local nodes of `threads` compute threads each, with a note where
 * they want more cores than this machine has: every exchange of a split model waits for its
 * slowest node, and a node without a core is the slowest, so such a run can be slower than
 * fewer nodes (docs/parallel.md, "Local nodes and cores").
 */
export function startingLine(n: number, threads: number, cores: number = availableParallelism()): string {
  const line = `starting ${n} local node(s), ${threads} thread(s) each`;
  if (n * threads <= cores) return line;
  const fit = Math.max(1, Math.floor(cores / threads));
  return (
    `${line}\nnote: ${n} node(s) x ${threads} thread(s) want ${n * threads} cores and this machine has ${cores}: ` +
    `the nodes take turns on the cores and each exchange waits for the one without, so this can run slower than ${fit} node(s)`
  );
}

/** Starts `n` node processes on 127.0.0.1 and waits until each listens. */
export async function launchLocalNodes(n: number, o: LaunchOptions): Promise<LocalNodes> {
  // read before any node starts: a malformed TANDEM_NODE_START_MS leaves nothing to stop
  const timeoutMs = o.timeoutMs ?? nodeStartMs();
  const started = Array.from({ length: n }, (_, r) => startOne(r, { ...o, timeoutMs }));
  const processes = started.map((s) => s.proc);
  const stop = async (): Promise<void> => {
    for (const p of processes) if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
    await Promise.all(
      processes.map(async (p) => {
        if (!(await waitExit(p, 2000))) {
          p.kill('SIGKILL');
          await waitExit(p, 2000);
        }
      }),
    );
  };
  const exitCause = async (rank: number, waitMs = 1000): Promise<string | undefined> => {
    const p = processes[rank];
    if (!p || !(await waitExit(p, waitMs))) return undefined;
    const how = p.signalCode
      ? `was killed by ${p.signalCode}${p.signalCode === 'SIGKILL' ? ' (out of memory?)' : ''}`
      : `exited with code ${p.exitCode}`;
    const tail = started[rank]!.stderr().trim().split('\n').slice(-4).join(' | ');
    return tail ? `${how}: ${tail}` : how;
  };
  const explain = async (e: unknown): Promise<unknown> => {
    if (!isTandemError(e, 'CLUSTER_NODE_LOST')) return e;
    const m = /^node (\d+)$/.exec(String(e.details?.node ?? ''));
    const cause = m ? await exitCause(Number(m[1])) : undefined;
    if (!cause) return e;
    return new TandemError('CLUSTER_NODE_LOST', `${e.message}; the node process ${cause}`, {
      hint: e.hint ?? '',
      details: { ...e.details, cause },
      cause: e,
    });
  };
  try {
    const addresses = await Promise.all(started.map((s) => s.address));
    return { addresses, processes, stop, exitCause, explain };
  } catch (e) {
    await stop();
    throw e;
  }
}
