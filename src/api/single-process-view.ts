import { hostname } from 'node:os';
import type { ClusterView } from '../cluster/index.js';
import type { ServedModel } from './served-model.js';

/**
 * GET /v1/cluster for a model served from this process: one member (this host, alive, its
 * process's resident memory) holding every layer, placed once, with no links and no events.
 * The shape is a cluster's, so that a client (the dashboard) reads both the same way.
 */
export function singleProcessView(served: ServedModel, address: string, startedAtMs: number): ClusterView {
  const id = hostname();
  const layers = served.model.config.blockCount;
  return {
    members: [
      {
        id,
        address,
        pid: process.pid,
        state: 'alive',
        memory_bytes: process.memoryUsage.rss(),
        speed: null,
        last_heartbeat_ms: 0,
        compute_share: 1,
        comm_share: 0,
      },
    ],
    links: [],
    placement: {
      parallel: 'none',
      provider: 'local',
      reason: null,
      ranks: [{ id, holds: `layers 0-${layers - 1} (the whole model)` }],
    },
    waiting: null,
    replan: null,
    placements: 1,
    replacements: 0,
    events: [
      { kind: 'joined', atMs: startedAtMs, message: `${id} loaded ${served.name} in its own process` },
    ],
  };
}
