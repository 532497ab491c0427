import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { TandemError } from '../errors/index.js';
import type { AddressedLink } from './addressing.js';
import type { TopologyClass } from './classify.js';
import { makeGraph, type Connectivity, type TopologyGraph } from './model.js';

/** What `tandem init` writes and later commands (serve, bench, topology) read. */
export interface ClusterConfig {
  version: 1;
  mode: 'rdma' | 'tcp';
  /** What was asked for, and what the cables gave. */
  requested: 'ring' | 'mesh' | 'auto';
  algorithm: 'mesh' | 'ring' | 'relayed';
  class: TopologyClass;
  /** Ring order when the algorithm is ring. */
  ring?: string[];
  /** This host's name (the config is per host; everything else is identical on all hosts). */
  self: string;
  hosts: string[];
  links: AddressedLink[];
  connectivity: Connectivity;
  routes: { from: string; to: string; via: string[] }[];
  port: number;
  createdAt: string;
}

export function defaultConfigPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.TANDEM_CONFIG ?? join(homedir(), '.config', 'tandem', 'cluster.json');
}

/** Writes atomically (temp file + rename) so a reader never sees half a config. */
export function writeClusterConfig(path: string, config: ClusterConfig): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(config, null, 2) + '\n');
  renameSync(tmp, path);
}

export function readClusterConfig(path: string): { config: ClusterConfig; graph: TopologyGraph } {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new TandemError(
      'TOPOLOGY_BAD_CONFIG',
      `cannot read the cluster config '${path}': ${(e as Error).message}`,
      {
        hint: 'run `tandem init` to write it, or pass --config with its path',
      },
    );
  }
  const c = value as Partial<ClusterConfig>;
  if (c.version !== 1 || !Array.isArray(c.hosts) || !Array.isArray(c.links) || typeof c.self !== 'string') {
    throw new TandemError(
      'TOPOLOGY_BAD_CONFIG',
      `'${path}' is not a tandem cluster config (version 1 with hosts, links and self)`,
      {
        hint: 'run `tandem init` again to rewrite it',
      },
    );
  }
  const graph = makeGraph(c.hosts, c.links);
  return { config: c as ClusterConfig, graph };
}
