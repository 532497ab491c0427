import { readFileSync } from 'node:fs';
import { TandemError } from '../errors/index.js';
import { parseBytes } from '../parallel/index.js';
import { importMlxHostfile, makeGraph, type HostAddresses, type TopologyGraph } from '../topology/index.js';

/** One node of a hostfile: where its agent listens, and optionally its memory cap and relative speed. */
export interface HostEntry {
  address: string;
  memLimit?: number;
  speed?: number;
}

function bad(file: string, line: number, why: string): TandemError {
  return new TandemError('CLUSTER_BAD_HOSTFILE', `${file}:${line}: ${why}`, {
    hint: 'write one node per line as host:port [mem=16G] [speed=1.5]; # starts a comment',
    details: { file, line },
  });
}

/**
 * Parses a hostfile: one node per line, `host:port` of its `tandem node --listen`, then
 * optional `mem=BYTES` (K/M/G suffixes) and `speed=X` (relative; placement gives faster
 * nodes more layers). Blank lines and `#` comments are ignored. Order is rank order.
 */
export function parseHostfile(text: string, file = 'hostfile'): HostEntry[] {
  const out: HostEntry[] = [];
  // Line of each host:port seen; host case-insensitive, port as a number (07000 is 7000).
  const seen = new Map<string, number>();
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const words = (lines[i] as string).replace(/#.*/, '').trim().split(/\s+/).filter(Boolean);
    if (words.length === 0) continue;
    const [address, ...rest] = words as [string, ...string[]];
    const m = /^(\[[^\]]+\]|[^:\s]+):(\d+)$/.exec(address);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
      throw bad(file, i + 1, `'${address}' is not host:port`);
    // Two ranks at one address would both connect to the same agent, which serves one
    // session: the launch would wait for the missing rank until the handshake timed out.
    const node = `${(m[1] as string).toLowerCase()}:${Number(m[2])}`;
    const first = seen.get(node);
    if (first !== undefined) {
      throw new TandemError(
        'CLUSTER_BAD_HOSTFILE',
        `${file}:${i + 1}: '${address}' is already listed on line ${first}; each node must appear once`,
        {
          hint: 'remove the duplicate line; to run two nodes on one host, start each `tandem node --listen` on its own port and list both ports',
          details: { file, line: i + 1, firstLine: first, address },
        },
      );
    }
    seen.set(node, i + 1);
    const entry: HostEntry = { address };
    for (const w of rest) {
      const [key, value = ''] = w.split('=', 2) as [string, string?];
      if (key === 'mem') {
        const n = parseBytes(value);
        if (n === undefined || n <= 0) throw bad(file, i + 1, `mem='${value}' is not a byte size`);
        entry.memLimit = n;
      } else if (key === 'speed') {
        const n = Number(value);
        if (!(n > 0)) throw bad(file, i + 1, `speed='${value}' must be a positive number`);
        entry.speed = n;
      } else throw bad(file, i + 1, `unknown field '${w}'`);
    }
    out.push(entry);
  }
  if (out.length === 0) throw bad(file, 1, 'no nodes listed');
  return out;
}

/** The port `tandem node` listens on by default; an MLX hostfile names hosts, not ports. */
export const defaultNodePort = 7100;

/**
 * A hostfile in either format, read once for every command that takes hosts: the nodes to
 * connect to (`run --hosts`, `bench cluster --hosts`) and the graph and ssh names to check
 * (`doctor`, `topology`). A `host:port` list has no cables, so its graph has hosts only.
 */
export interface Hostfile {
  file: string;
  format: 'list' | 'mlx';
  /** Rank order; an MLX host's node is its first ip (else its ssh name) at defaultNodePort. */
  entries: HostEntry[];
  graph: TopologyGraph;
  /** Each graph host's ssh name and ips. */
  addresses: Map<string, HostAddresses>;
}

const formatsHint =
  'pass a host:port list (one node per line: host:port [mem=16G] [speed=1.5]) or an MLX JSON hostfile ({"hosts": [{"ssh": ..., "ips": [...]}]})';

/** Parses either format: text whose first non-blank character is `{` is an MLX JSON hostfile. */
export function parseAnyHostfile(text: string, file = 'hostfile'): Hostfile {
  if (!text.trimStart().startsWith('{')) {
    const entries = parseHostfile(text, file);
    const hostOf = (address: string): string => address.replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1');
    // Two nodes on one host (two ports) are two graph hosts, named by their address.
    const unique = new Set(entries.map((e) => hostOf(e.address))).size === entries.length;
    const names = entries.map((e) => (unique ? hostOf(e.address) : e.address));
    const addresses = new Map(entries.map((e, i) => [names[i] as string, { ssh: hostOf(e.address) }]));
    return { file, format: 'list', entries, graph: makeGraph(names, []), addresses };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new TandemError('CLUSTER_BAD_HOSTFILE', `${file}: not valid JSON: ${(e as Error).message}`, {
      hint: formatsHint,
      details: { file },
    });
  }
  const { graph, hostfile, addresses } = importMlxHostfile(value);
  if (hostfile.hosts.length === 0)
    throw new TandemError('CLUSTER_BAD_HOSTFILE', `${file}: the MLX hostfile lists no hosts`, {
      hint: formatsHint,
      details: { file },
    });
  const entries = hostfile.hosts.map((h) => {
    const host = h.ips[0] ?? h.ssh;
    return { address: `${host.includes(':') ? `[${host}]` : host}:${defaultNodePort}` };
  });
  return { file, format: 'mlx', entries, graph, addresses };
}

/** Reads a hostfile of either format; a missing or unreadable file is CLUSTER_BAD_HOSTFILE. */
export function loadHostfile(path: string, option = '--hosts'): Hostfile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new TandemError('CLUSTER_BAD_HOSTFILE', `cannot read hostfile ${path}: ${(e as Error).message}`, {
      hint: `pass an existing file to ${option}; ${formatsHint}`,
      details: { file: path },
    });
  }
  return parseAnyHostfile(text, path);
}

/** The nodes of a hostfile of either format, in rank order. */
export function readHostfile(path: string): HostEntry[] {
  return loadHostfile(path).entries;
}
