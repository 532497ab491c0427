// A CPU cap for one process on Linux (the cgroup cpu controller, root): how the join bench
// makes one member a slow machine on a machine whose cores every member shares.
import { existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TandemError } from '../src/errors/index.js';

/** The smallest quota the kernel takes (1 ms) and the period used unless that forces a longer one. */
const MIN_QUOTA_US = 1000;
const PERIOD_US = 10_000;

/**
 * A cgroup whose processes together get at most `cores` of one core, in short periods (10 ms,
 * longer for caps under a tenth) so a capped process stalls briefly and often rather than for
 * long stretches. cgroup v2 (cpu.max) where mounted so, else v1 (cpu.cfs_quota_us).
 */
export class CpuCap {
  private constructor(
    /** The file a process id is written to, to put that process under the cap. */
    readonly procs: string,
    private readonly dir: string,
  ) {}

  static create(name: string, cores: number): CpuCap {
    if (!(cores > 0 && cores <= 1))
      throw new TandemError('CLI_USAGE', `a CPU cap of ${cores} core is not in (0, 1]`, {
        hint: 'pass a fraction of one core, e.g. 0.05',
      });
    const period = Math.max(PERIOD_US, Math.ceil(MIN_QUOTA_US / cores));
    const quota = Math.round(period * cores);
    const v2 = existsSync('/sys/fs/cgroup/cgroup.subtree_control');
    const dir = v2 ? join('/sys/fs/cgroup', name) : join('/sys/fs/cgroup/cpu', name);
    try {
      mkdirSync(dir);
      if (v2) writeFileSync(join(dir, 'cpu.max'), `${quota} ${period}`);
      else {
        writeFileSync(join(dir, 'cpu.cfs_period_us'), String(period));
        writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quota));
      }
    } catch (e) {
      if (existsSync(dir)) rmdirSync(dir);
      throw new TandemError('CLI_USAGE', `cannot cap a member's CPU (${dir}): ${(e as Error).message}`, {
        hint: 'the cap needs Linux, root and the cgroup cpu controller; leave out --slow-member',
        cause: e,
      });
    }
    return new CpuCap(join(dir, 'cgroup.procs'), dir);
  }

  /** Why no cap can be made here (not Linux, not root, no cgroup cpu controller), or undefined when one can. */
  static unavailable(): string | undefined {
    if (process.platform !== 'linux') return 'a CPU cap needs Linux';
    if (process.getuid?.() !== 0) return 'a CPU cap needs root';
    try {
      CpuCap.create(`tandem-cap-check-${process.pid}`, 0.5).remove();
      return undefined;
    } catch (e) {
      return (e as Error).message;
    }
  }

  /** Removes the cgroup (its processes must have exited). Never throws. */
  remove(): void {
    try {
      rmdirSync(this.dir);
    } catch {
      // a process still in it (not yet reaped): the kernel frees the group once it is empty and removed later
    }
  }
}
