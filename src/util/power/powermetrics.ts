import { spawn } from 'node:child_process';
import type { PowerMeter, PowerProbe } from './power-meter.js';

/** One sample of `powermetrics` output: its interval and the machine's power over it. */
export interface PowermetricsSample {
  elapsedMs: number;
  watts: number;
}

/** Sampling interval asked of powermetrics, ms: the meter's figure lags by up to one. */
const INTERVAL_MS = 1000;
/** How long the first sample may take before the meter is given up. */
const FIRST_SAMPLE_MS = 5000;

const SAMPLE_HEAD = /^\*\*\* Sampled system activity .*\(([\d.]+)ms elapsed\)/;
/**
 * Power lines, best first: Apple silicon's total over CPU, GPU and ANE; its package figure;
 * an Intel Mac's package estimate (in W).
 */
const POWER_LINES: [RegExp, number][] = [
  [/^Combined Power \(CPU \+ GPU \+ ANE\):\s*([\d.]+)\s*mW/m, 1e-3],
  [/^Package Power:\s*([\d.]+)\s*mW/m, 1e-3],
  [/^Intel energy model derived package power \(CPUs\+GT\+SA\):\s*([\d.]+)\s*W/m, 1],
  [/^CPU Power:\s*([\d.]+)\s*mW/m, 1e-3],
];

/**
 * The samples in powermetrics' text output (`--samplers cpu_power`): each begins with a
 * `*** Sampled system activity (...) (N ms elapsed) ***` line; a sample without a power line
 * (or cut off at the end of `text`) is left out.
 */
export function parsePowermetrics(text: string): PowermetricsSample[] {
  const samples: PowermetricsSample[] = [];
  const blocks = text.split(/^(?=\*\*\* Sampled system activity)/m);
  for (const block of blocks) {
    const head = SAMPLE_HEAD.exec(block);
    if (!head) continue;
    for (const [re, scale] of POWER_LINES) {
      const m = re.exec(block);
      if (m) {
        samples.push({ elapsedMs: Number(head[1]), watts: Number(m[1]) * scale });
        break;
      }
    }
  }
  return samples;
}

/** Why powermetrics refused, from its stderr (or sudo's), or undefined if it did not say. */
export function powermetricsRefusal(stderr: string): string | undefined {
  if (/must be invoked as the superuser/i.test(stderr))
    return 'powermetrics needs root: run tandem as root or allow `sudo -n powermetrics` in sudoers';
  if (/a password is required|a terminal is required|not in the sudoers/i.test(stderr))
    return 'powermetrics needs root and `sudo -n powermetrics` is not allowed without a password (add a NOPASSWD sudoers rule for it)';
  return undefined;
}

/**
 * Joules from powermetrics' output as it streams in, chunk by chunk: each sample's watts times
 * its interval. A sample counts once the next sample's head follows it (until then it may be
 * incomplete), so the figure lags by one interval.
 */
export class PowermetricsEnergy {
  joules = 0;
  samples = 0;
  private pending = '';

  push(chunk: string): void {
    this.pending += chunk;
    const at = this.pending.lastIndexOf('*** Sampled system activity');
    if (at <= 0) return;
    for (const s of parsePowermetrics(this.pending.slice(0, at))) {
      this.joules += (s.watts * s.elapsedMs) / 1000;
      this.samples++;
    }
    this.pending = this.pending.slice(at);
  }
}

/**
 * A meter fed by a long-running `powermetrics` (as root, or through `sudo -n`): each sample's
 * watts times its interval adds to the energy. Resolves once the first sample arrived, or
 * with why it did not.
 */
export function openPowermetricsMeter(): Promise<PowerProbe> {
  const asRoot = process.getuid?.() === 0;
  const argv = ['powermetrics', '--samplers', 'cpu_power', '-i', String(INTERVAL_MS)];
  const child = spawn(asRoot ? argv[0]! : 'sudo', asRoot ? argv.slice(1) : ['-n', ...argv], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const energy = new PowermetricsEnergy();
  let stderr = '';
  return new Promise<PowerProbe>((resolve) => {
    const give = (probe: PowerProbe): void => {
      clearTimeout(timer);
      if (probe.reason !== undefined) child.kill();
      resolve(probe);
    };
    const meter: PowerMeter = {
      source: 'powermetrics',
      joules: () => energy.joules,
      close: () => void child.kill(),
    };
    const timer = setTimeout(
      () => give({ reason: `powermetrics gave no sample within ${FIRST_SAMPLE_MS / 1000} s` }),
      FIRST_SAMPLE_MS,
    );
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      energy.push(chunk);
      if (energy.samples > 0) give({ meter });
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', (e) => give({ reason: `powermetrics cannot be started: ${e.message}` }));
    child.on('exit', (code) =>
      give({
        reason:
          powermetricsRefusal(stderr) ??
          `powermetrics exited (${code}) before its first sample: ${stderr.trim().split('\n').pop() ?? ''}`,
      }),
    );
    child.unref();
    (child.stdout as unknown as { unref?: () => void }).unref?.();
    (child.stderr as unknown as { unref?: () => void }).unref?.();
  });
}
