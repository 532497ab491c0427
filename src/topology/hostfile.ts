import { TandemError } from '../errors/index.js';
import { linksBetween, makeGraph, type Link, type TopologyGraph } from './model.js';

/**
 * MLX's `mlx.launch` hostfile (as written by `mlx.distributed_config`):
 * `{ "backend": "jaccl", "envs": [...], "hosts": [{ "ssh": "m1", "ips": ["..."], "rdma": [null, "rdma_en3", ...] }] }`.
 * `rdma[i][j]` names host i's RDMA device toward host j (`rdma_<interface>`), null on the
 * diagonal and for uncabled pairs, or a list when several cables join the pair.
 */
export interface MlxHostfile {
  backend: string;
  envs: string[];
  hosts: MlxHost[];
}

export interface MlxHost {
  ssh: string;
  ips: string[];
  rdma: (string | string[] | null)[];
}

/** Per-host facts the graph does not hold: how to reach the host for ssh and its IP addresses. */
export interface HostAddresses {
  ssh?: string;
  ips?: string[];
}

export function exportMlxHostfile(
  graph: TopologyGraph,
  addresses: ReadonlyMap<string, HostAddresses> = new Map(),
  backend = 'jaccl',
  envs: string[] = [],
): MlxHostfile {
  const hosts = graph.hosts.map((h) => {
    const rdma = graph.hosts.map((other): string | string[] | null => {
      if (other === h) return null;
      const devices = linksBetween(graph, h, other)
        .map((l) => `rdma_${l.a === h ? l.aPort : l.bPort}`)
        .sort();
      if (devices.length === 0) return null;
      return devices.length === 1 ? (devices[0] as string) : devices;
    });
    const a = addresses.get(h);
    return { ssh: a?.ssh ?? h, ips: a?.ips ?? [], rdma };
  });
  return { backend, envs, hosts };
}

function bad(message: string, details?: Record<string, unknown>): TandemError {
  return new TandemError('TOPOLOGY_BAD_HOSTFILE', `hostfile: ${message}`, {
    hint: 'an MLX hostfile is {"hosts": [{"ssh": "...", "ips": [...], "rdma": [null, "rdma_en2", ...]}, ...]}',
    ...(details ? { details } : {}),
  });
}

const devicesOf = (v: unknown): string[] | undefined =>
  v === null || v === undefined
    ? []
    : typeof v === 'string'
      ? [v]
      : Array.isArray(v) && v.every((x) => typeof x === 'string')
        ? (v as string[])
        : undefined;

/**
 * Reads an MLX hostfile (a parsed JSON value) into a graph plus each host's ssh name and ips.
 * A cable is taken from the device matrix; both sides must name the same number of devices.
 */
export function importMlxHostfile(value: unknown): {
  graph: TopologyGraph;
  hostfile: MlxHostfile;
  addresses: Map<string, HostAddresses>;
} {
  if (typeof value !== 'object' || value === null || !Array.isArray((value as { hosts?: unknown }).hosts))
    throw bad('no "hosts" list');
  const raw = value as { backend?: unknown; envs?: unknown; hosts: unknown[] };
  const hosts: MlxHost[] = raw.hosts.map((h, i) => {
    if (typeof h !== 'object' || h === null) throw bad(`hosts[${i}] is not an object`, { index: i });
    const o = h as { ssh?: unknown; ips?: unknown; rdma?: unknown };
    if (typeof o.ssh !== 'string' || o.ssh === '')
      throw bad(`hosts[${i}].ssh must be a host name`, { index: i });
    const ips = o.ips === undefined ? [] : o.ips;
    if (!Array.isArray(ips) || !ips.every((x) => typeof x === 'string'))
      throw bad(`hosts[${i}].ips must be a list of strings`, { index: i });
    const rdma = o.rdma === undefined ? [] : o.rdma;
    if (!Array.isArray(rdma)) throw bad(`hosts[${i}].rdma must be a list`, { index: i });
    return { ssh: o.ssh, ips: ips as string[], rdma: rdma as MlxHost['rdma'] };
  });
  const names = hosts.map((h) => h.ssh);
  const links: Link[] = [];
  for (let i = 0; i < hosts.length; i++) {
    const row = (hosts[i] as MlxHost).rdma;
    if (row.length !== 0 && row.length !== hosts.length)
      throw bad(`hosts[${i}].rdma has ${row.length} entries for ${hosts.length} hosts`, { index: i });
    for (let j = i + 1; j < hosts.length; j++) {
      const mine = devicesOf(row[j]);
      const theirs = devicesOf((hosts[j] as MlxHost).rdma[i]);
      if (mine === undefined || theirs === undefined)
        throw bad(`rdma entry between hosts ${i} and ${j} is not a device name or list`);
      if (mine.length !== theirs.length) {
        throw bad(
          `hosts ${names[i]} and ${names[j]} disagree on their cables (${mine.length} vs ${theirs.length} devices)`,
          { i, j },
        );
      }
      for (let k = 0; k < mine.length; k++) {
        links.push({
          a: names[i] as string,
          aPort: stripRdma(mine[k] as string),
          b: names[j] as string,
          bPort: stripRdma(theirs[k] as string),
          kind: 'tb5',
        });
      }
    }
  }
  const hostfile: MlxHostfile = {
    backend: typeof raw.backend === 'string' ? raw.backend : '',
    envs: Array.isArray(raw.envs) ? raw.envs.filter((e): e is string => typeof e === 'string') : [],
    hosts,
  };
  const addresses = new Map(hosts.map((h) => [h.ssh, { ssh: h.ssh, ips: h.ips }]));
  return { graph: makeGraph(names, links), hostfile, addresses };
}

const stripRdma = (device: string): string => (device.startsWith('rdma_') ? device.slice(5) : device);
