import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { PowerMeter, PowerProbe } from './power-meter.js';

/** Where Linux exposes RAPL (the intel_rapl driver; AMD Zen packages appear here too). */
export const POWERCAP_ROOT = '/sys/class/powercap';

/** One top-level RAPL zone: its energy counter in microjoules and where that counter wraps to 0. */
interface Zone {
  name: string;
  energyPath: string;
  /** The counter's range in µJ: it counts up to this value and starts again at 0. */
  range: number;
  last: number;
}

/** Reads a sysfs file's text (tests give one that fails as a root-only file does). */
export type ReadText = (path: string) => string;

const readSysfs: ReadText = (path) => readFileSync(path, 'utf8');

function readNumber(read: ReadText, path: string): number {
  const value = Number(read(path).trim());
  if (!Number.isFinite(value)) throw new Error(`${path} does not hold a number`);
  return value;
}

/**
 * The zones to add up. Top-level zones are `intel-rapl:N` (subzones `intel-rapl:N:M`, the cores
 * or the uncore of package N, are inside it and not added again). A `psys` zone covers the
 * whole platform, packages included: where one exists it is the only zone read.
 */
function topZones(root: string, read: ReadText): { name: string; dir: string }[] {
  const zones = readdirSync(root)
    .filter((d) => /^intel-rapl:\d+$/.test(d))
    .sort()
    .map((d) => ({ dir: join(root, d), name: read(join(root, d, 'name')).trim() }));
  const psys = zones.filter((z) => z.name === 'psys');
  return psys.length > 0 ? psys : zones;
}

/** The µJ a counter advanced from `last` to `now`, across one wrap at `range`. */
export function raplDelta(last: number, now: number, range: number): number {
  return now >= last ? now - last : range - last + now;
}

/**
 * A meter over RAPL's energy counters under `root` (a fake tree in tests), or why there is
 * none: no powercap tree, no RAPL zone, or counters readable by root only (the kernel made
 * energy_uj 0400 after the PLATYPUS side channel).
 */
export function openRaplMeter(root = POWERCAP_ROOT, read: ReadText = readSysfs): PowerProbe {
  let found: { name: string; dir: string }[];
  try {
    found = topZones(root, read);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      return {
        reason: `no RAPL power counters: ${root} does not exist (a VM, or a CPU or kernel without RAPL)`,
      };
    return { reason: `no RAPL power counters: ${root} cannot be read (${(e as Error).message})` };
  }
  if (found.length === 0) return { reason: `no RAPL power counters: ${root} has no intel-rapl zone` };
  const zones: Zone[] = [];
  for (const z of found) {
    const energyPath = join(z.dir, 'energy_uj');
    try {
      zones.push({
        name: z.name,
        energyPath,
        range: readNumber(read, join(z.dir, 'max_energy_range_uj')),
        last: readNumber(read, energyPath),
      });
    } catch (e) {
      const denied = (e as NodeJS.ErrnoException).code === 'EACCES';
      return {
        reason: denied
          ? `RAPL counters are readable by root only (${energyPath}); run as root or grant read access (e.g. a udev rule or chmod o+r on energy_uj)`
          : `RAPL counter ${energyPath} cannot be read: ${(e as Error).message}`,
      };
    }
  }
  return { meter: new RaplMeter(zones, read) };
}

class RaplMeter implements PowerMeter {
  readonly source: string;
  /** µJ counted since the meter opened, over every zone. */
  private total = 0;

  constructor(
    private readonly zones: Zone[],
    private readonly read: ReadText,
  ) {
    this.source = `RAPL ${zones.map((z) => z.name).join(' + ')}`;
  }

  joules(): number {
    for (const z of this.zones) {
      const now = readNumber(this.read, z.energyPath);
      this.total += raplDelta(z.last, now, z.range);
      z.last = now;
    }
    return this.total / 1e6;
  }

  close(): void {}
}
