import { readFileSync } from 'node:fs';
import { TandemError } from '../../errors/index.js';

/**
 * A link between two machines as the forecast sees it: the time one small message takes
 * (software included: for TCP the kernel stack on both ends) and the bandwidth of one
 * direction. A collective of S bytes over it costs steps x latency + wire bytes / bandwidth.
 */
export interface LinkSpec {
  id: string;
  name: string;
  /** Microseconds per message (one step of a collective). */
  latencyUs: number;
  /** Usable GB/s one way. */
  bandwidthGBs: number;
  source: string;
}

export const linkCatalog: readonly LinkSpec[] = [
  {
    id: 'tb5-rdma',
    name: 'Thunderbolt 5 with RDMA (macOS 26.2+)',
    latencyUs: 50,
    bandwidthGBs: 6,
    source:
      'Jeff Geerling, "1.5 TB of VRAM on Mac Studio" (2025-12-18): under 50 us as exo sees it (the link alone: 5-9 us, Stabilise.io via aiexpert.news); about 6 GB/s usable one way (topology plan assumes the same)',
  },
  {
    id: 'tb5-tcp',
    name: 'Thunderbolt 5, IP over Thunderbolt (TCP)',
    latencyUs: 300,
    bandwidthGBs: 5,
    source:
      'Jeff Geerling, "1.5 TB of VRAM on Mac Studio" (2025-12-18): ~300 us without RDMA, 50-60 Gb/s real-world throughput over Thunderbolt',
  },
  {
    id: 'tb4-tcp',
    name: 'Thunderbolt 4, IP over Thunderbolt (TCP)',
    latencyUs: 300,
    bandwidthGBs: 2.5,
    source: 'same stack as tb5-tcp; 40 Gb/s line rate, about half of it usable by TCP',
  },
  {
    id: '10gbe',
    name: '10 Gigabit Ethernet (TCP, one switch)',
    latencyUs: 50,
    bandwidthGBs: 1.15,
    source: 'line rate less Ethernet/IP/TCP framing; a kernel TCP round trip through one switch',
  },
  {
    id: '2.5gbe',
    name: '2.5 Gigabit Ethernet (TCP)',
    latencyUs: 100,
    bandwidthGBs: 0.29,
    source: 'line rate less framing; consumer NICs and switches',
  },
  {
    id: '1gbe',
    name: 'Gigabit Ethernet (TCP)',
    latencyUs: 100,
    bandwidthGBs: 0.117,
    source: 'line rate less framing',
  },
  {
    id: 'wifi',
    name: 'Wi-Fi 6 (TCP)',
    latencyUs: 3000,
    bandwidthGBs: 0.05,
    source: 'typical home Wi-Fi: a few ms a message, a few hundred Mb/s shared',
  },
];

export function findLink(id: string): LinkSpec {
  const found = linkCatalog.find((l) => l.id === id.trim().toLowerCase());
  if (!found)
    throw new TandemError('PAR_UNKNOWN_LINK', `plan: unknown link '${id}'`, {
      hint: `use one of: ${linkCatalog.map((l) => l.id).join(', ')}, or a JSON file {"latency_us":..,"bandwidth_GBps":..}`,
      details: { link: id },
    });
  return found;
}

/** A link from a JSON file: `{"latency_us": N, "bandwidth_GBps": N}` (what a measurement gave). */
export function readLinkFile(path: string): LinkSpec {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (cause) {
    throw new TandemError('PAR_UNKNOWN_LINK', `plan: cannot read link file ${path}`, {
      hint: 'give a JSON file {"latency_us": 10, "bandwidth_GBps": 6}, or a link name',
      cause,
      details: { path },
    });
  }
  const o = (raw ?? {}) as Record<string, unknown>;
  const lat = o['latency_us'];
  const bw = o['bandwidth_GBps'];
  if (typeof lat !== 'number' || !(lat >= 0) || typeof bw !== 'number' || !(bw > 0))
    throw new TandemError('PAR_UNKNOWN_LINK', `plan: ${path} needs latency_us >= 0 and bandwidth_GBps > 0`, {
      hint: 'write {"latency_us": 10, "bandwidth_GBps": 6}',
      details: { path },
    });
  return { id: path, name: `measured (${path})`, latencyUs: lat, bandwidthGBs: bw, source: path };
}
