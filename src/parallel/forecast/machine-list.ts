import { TandemError } from '../../errors/index.js';
import { findMachineSpec, type MachineSpec } from './machine-catalog.js';
import type { ForecastMachine } from './predict.js';

/** The most machines one forecast takes (as `topology plan`). */
export const maxForecastMachines = 64;

/**
 * What `tandem plan --calibrate` measured on this machine: its memory, cores, and the rates
 * tandem's own kernels reached (decode weight bytes a second, prefill FLOP/s, ms a layer).
 */
export interface Calibration {
  date: string;
  threads: number;
  memoryBytes: number;
  cpuCores: number;
  decodeBytesPerS: number;
  prefillFlopsPerS: number;
  layerOverheadMs: number;
}

export function thisMachine(c: Calibration | undefined): MachineSpec {
  if (!c)
    throw new TandemError('PAR_NOT_CALIBRATED', "plan: 'this' needs a calibration of this machine", {
      hint: 'run `tandem plan --calibrate` first (about a minute); it measures memory bandwidth and kernel speed here',
    });
  return {
    id: 'this',
    name: `this machine (calibrated ${c.date}, ${c.threads} threads)`,
    kind: 'this',
    memory: [{ gb: c.memoryBytes / 1e9, bandwidthGBs: c.decodeBytesPerS / 1e9 }],
    cpuCores: c.cpuCores,
    cpuGflops: c.prefillFlopsPerS / 1e9,
    cpuBandwidthShare: 1,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 0,
    sources: ['tandem plan --calibrate'],
  };
}

function badPart(part: string, why: string): TandemError {
  return new TandemError('TOPOLOGY_UNKNOWN_MACHINE', `plan: cannot read '${part}' in --machines: ${why}`, {
    hint: 'write machines as "3x macbook-pro-m4-max:64g, 1x mac-studio-m3-ultra:512g" (tandem plan --list-machines)',
    details: { part },
  });
}

/** Parses `"3x macbook-pro-m4-max:64g, 1x mac-studio-m3-ultra:512g, this"` (memory suffix optional: the smallest). */
export function parseForecastMachines(spec: string, calibration?: Calibration): ForecastMachine[] {
  const out: ForecastMachine[] = [];
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const match = /^(?:(\d+)\s*[x*]\s*)?([a-z0-9.-]+)(?::(\d+(?:\.\d+)?)\s*g(?:b)?)?$/i.exec(part);
    if (!match) throw badPart(part, 'expected [COUNT x] ID[:MEMORYg]');
    const count = match[1] === undefined ? 1 : Number(match[1]);
    if (count < 1) throw badPart(part, `${count} machines`);
    if (out.length + count > maxForecastMachines)
      throw badPart(part, `more than ${maxForecastMachines} machines in all`);
    const id = match[2]!.toLowerCase();
    const machine = id === 'this' ? thisMachine(calibration) : findMachineSpec(id);
    const gb = match[3] === undefined ? undefined : Number(match[3]);
    const memory = gb === undefined ? machine.memory[0]! : machine.memory.find((m) => m.gb === gb);
    if (!memory)
      throw badPart(
        part,
        `${machine.id} comes with ${machine.memory.map((m) => `${m.gb}g`).join(', ')}, not ${gb}g`,
      );
    for (let i = 0; i < count; i++)
      out.push({
        name: machine.id,
        spec: machine,
        memory,
        ...(id === 'this' && calibration
          ? {
              rates: {
                decodeBytesPerS: calibration.decodeBytesPerS,
                prefillFlopsPerS: calibration.prefillFlopsPerS,
                layerOverheadMs: calibration.layerOverheadMs,
              },
            }
          : {}),
      });
  }
  if (out.length === 0) throw badPart(spec, 'no machine named');
  const total = new Map<string, number>();
  for (const m of out) total.set(m.name, (total.get(m.name) ?? 0) + 1);
  const seen = new Map<string, number>();
  for (const m of out) {
    const k = (seen.get(m.name) ?? 0) + 1;
    seen.set(m.name, k);
    if ((total.get(m.name) ?? 0) > 1) m.name = `${m.name}-${k}`;
  }
  return out;
}
