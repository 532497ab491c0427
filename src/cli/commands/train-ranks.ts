import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

/** The CLI entry point next to this source tree. */
const tandemBin = fileURLToPath(new URL('../../../bin/tandem.js', import.meta.url));

/** Environment variable carrying the run's secret to the ranks `tandem train --nodes` starts. */
export const TRAIN_SECRET_ENV = 'TANDEM_TRAIN_SECRET';

export interface LocalRanks {
  secret: string;
  /** Starts ranks 1..size-1 once rank 0 listens at `address`. */
  start(address: string): void;
  /** Ends every rank still running (SIGTERM; SIGKILL after 2 s). */
  stop(): Promise<void>;
  /** Waits (bounded) for every rank to exit; returns the failures' descriptions. */
  wait(ms: number): Promise<string[]>;
}

/**
 * The processes of a local data-parallel run: this process is rank 0, and ranks 1..size-1
 * are `tandem train` with the same settings plus --rank and --rendezvous. Their stderr is
 * passed on prefixed with the rank; their stdout (nothing) is dropped.
 */
export function localRanks(size: number, args: (rank: number, address: string) => string[]): LocalRanks {
  const secret = process.env[TRAIN_SECRET_ENV] ?? randomBytes(16).toString('hex');
  const procs: ChildProcess[] = [];
  const exits: Promise<string | undefined>[] = [];
  return {
    secret,
    start(address) {
      for (let r = 1; r < size; r++) {
        const p = spawn(process.execPath, [tandemBin, 'train', ...args(r, address)], {
          stdio: ['ignore', 'ignore', 'pipe'],
          env: { ...process.env, [TRAIN_SECRET_ENV]: secret },
        });
        p.stderr?.setEncoding('utf8').on('data', (d: string) => {
          for (const line of d.split('\n')) if (line) process.stderr.write(`[rank ${r}] ${line}\n`);
        });
        procs.push(p);
        exits.push(
          new Promise((resolve) =>
            p.once('exit', (code, signal) =>
              resolve(code === 0 ? undefined : `rank ${r} exited with ${signal ?? `code ${code}`}`),
            ),
          ),
        );
      }
    },
    async stop() {
      for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
      const killer = setTimeout(() => {
        for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
      }, 2000);
      await Promise.all(exits);
      clearTimeout(killer);
    },
    async wait(ms) {
      const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), ms).unref());
      const all = await Promise.race([Promise.all(exits), timeout]);
      if (all === 'timeout') return [`ranks still running after ${ms} ms`];
      return all.filter((x): x is string => x !== undefined);
    },
  };
}
