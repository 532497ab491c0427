import { TandemError } from '../errors/index.js';

/** An Apple silicon Mac model and its Thunderbolt ports, as used by the cabling planner. */
export interface MacModel {
  id: string;
  name: string;
  /** Thunderbolt 5 ports, labelled by where they sit; RDMA over Thunderbolt needs these. */
  tb5Ports: readonly string[];
  /** Thunderbolt 4 / USB4 ports (IP over Thunderbolt only, no RDMA). */
  tb4Ports: number;
}

/*
 * Port counts from Apple's technical specifications pages (support.apple.com/en-us/docs/mac
 * and apple.com/<product>/specs), read for this table:
 *   - MacBook Pro 14-inch and 16-inch (M4 Pro / M4 Max, Nov 2024): three Thunderbolt 5 ports
 *     (two on the left, one on the right); the 14-inch with plain M4: three Thunderbolt 4.
 *   - Mac mini (M4 Pro, 2024): three Thunderbolt 5 ports at the back; plain M4: three
 *     Thunderbolt 4 at the back (the two front USB-C ports are USB 3).
 *   - Mac Studio (2025): M4 Max has four Thunderbolt 5 ports at the back (the two front USB-C
 *     ports are 10 Gb/s USB); M3 Ultra has six Thunderbolt 5 ports (four back, two front).
 *   - Mac Studio (M2 Ultra, 2023 / M1 Ultra, 2022): six Thunderbolt 4; MacBook Air (M4, 2025):
 *     two Thunderbolt 4; Mac Pro (M2 Ultra, 2023): eight Thunderbolt 4.
 *   - Apple TN3205 "Low-latency communication with RDMA over Thunderbolt": RDMA needs macOS
 *     26.2 on a Mac with Thunderbolt 5.
 * Check the specs page of a machine before buying for a cluster; this table is a planning aid.
 */
export const macModels: readonly MacModel[] = [
  {
    id: 'macbook-pro-m4-pro',
    name: 'MacBook Pro (M4 Pro, 2024)',
    tb5Ports: ['left-1', 'left-2', 'right-1'],
    tb4Ports: 0,
  },
  {
    id: 'macbook-pro-m4-max',
    name: 'MacBook Pro (M4 Max, 2024)',
    tb5Ports: ['left-1', 'left-2', 'right-1'],
    tb4Ports: 0,
  },
  { id: 'macbook-pro-m4', name: 'MacBook Pro 14-inch (M4, 2024)', tb5Ports: [], tb4Ports: 3 },
  {
    id: 'mac-mini-m4-pro',
    name: 'Mac mini (M4 Pro, 2024)',
    tb5Ports: ['rear-1', 'rear-2', 'rear-3'],
    tb4Ports: 0,
  },
  { id: 'mac-mini-m4', name: 'Mac mini (M4, 2024)', tb5Ports: [], tb4Ports: 3 },
  {
    id: 'mac-studio-m4-max',
    name: 'Mac Studio (M4 Max, 2025)',
    tb5Ports: ['rear-1', 'rear-2', 'rear-3', 'rear-4'],
    tb4Ports: 0,
  },
  {
    id: 'mac-studio-m3-ultra',
    name: 'Mac Studio (M3 Ultra, 2025)',
    tb5Ports: ['rear-1', 'rear-2', 'rear-3', 'rear-4', 'front-1', 'front-2'],
    tb4Ports: 0,
  },
  { id: 'mac-studio-m2-ultra', name: 'Mac Studio (M2 Ultra, 2023)', tb5Ports: [], tb4Ports: 6 },
  { id: 'mac-studio-m1-ultra', name: 'Mac Studio (M1 Ultra, 2022)', tb5Ports: [], tb4Ports: 6 },
  { id: 'macbook-air-m4', name: 'MacBook Air (M4, 2025)', tb5Ports: [], tb4Ports: 2 },
  { id: 'mac-pro-m2-ultra', name: 'Mac Pro (M2 Ultra, 2023)', tb5Ports: [], tb4Ports: 8 },
];

export function findMacModel(id: string): MacModel {
  const model = macModels.find((m) => m.id === id.trim().toLowerCase());
  if (!model) {
    throw new TandemError('TOPOLOGY_UNKNOWN_MACHINE', `topology plan: unknown machine '${id}'`, {
      hint: `use one of: ${macModels.map((m) => m.id).join(', ')}`,
      details: { machine: id },
    });
  }
  return model;
}

/** One machine of a planned cluster: a unique name (`mac-studio-m3-ultra-2`) and its model. */
export interface PlannedMachine {
  name: string;
  model: MacModel;
}

/**
 * The most machines one plan takes. The planner's cost grows steeply with the count, and at
 * 64 a plan still takes about a second on a small machine (docs/topology.md, "Commands", has
 * the figures); 64 is also the most nodes `tandem run --nodes` starts.
 */
export const maxPlannedMachines = 64;

function badList(message: string, details: Record<string, unknown>): TandemError {
  return new TandemError('INVALID_ARGUMENT', `topology plan: ${message}`, {
    hint: `write 1 to ${maxPlannedMachines} machines as "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"`,
    details,
  });
}

/** Parses `"3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"` into named machines (1 to maxPlannedMachines). */
export function parseMachines(spec: string): PlannedMachine[] {
  const out: PlannedMachine[] = [];
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const match = /^(?:(\d+)\s*[x*]\s*)?([a-z0-9-]+)$/i.exec(part);
    if (!match) {
      throw new TandemError(
        'TOPOLOGY_UNKNOWN_MACHINE',
        `topology plan: cannot read '${part}' in --machines`,
        {
          hint: 'write machines as "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"',
          details: { part },
        },
      );
    }
    const count = match[1] === undefined ? 1 : Number(match[1]);
    if (count < 1) throw badList(`'${part}' in --machines asks for ${count} machines`, { part });
    if (out.length + count > maxPlannedMachines) {
      throw badList(
        `--machines '${spec}' asks for more than ${maxPlannedMachines} machines, the most one plan takes`,
        { machines: spec, max: maxPlannedMachines },
      );
    }
    const model = findMacModel(match[2] as string);
    for (let i = 0; i < count; i++) out.push({ name: model.id, model });
  }
  if (out.length === 0) throw badList(`--machines '${spec}' names no machine`, { machines: spec });
  const total = new Map<string, number>();
  for (const m of out) total.set(m.model.id, (total.get(m.model.id) ?? 0) + 1);
  const seen = new Map<string, number>();
  for (const m of out) {
    const k = (seen.get(m.model.id) ?? 0) + 1;
    seen.set(m.model.id, k);
    if ((total.get(m.model.id) ?? 0) > 1) m.name = `${m.model.id}-${k}`;
  }
  return out;
}
