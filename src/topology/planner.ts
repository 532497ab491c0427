import { TandemError } from '../errors/index.js';
import { diameter } from './classify.js';
import type { Link, TopologyGraph } from './model.js';
import type { PlannedMachine } from './machines.js';

export interface Cable {
  a: string;
  a_port: string;
  b: string;
  b_port: string;
}

export type PlannedTopology = 'single' | 'full-mesh' | 'ring' | 'ring-with-chords';

/** Expected all-reduce time of one message size on the planned cabling. */
export interface AllReduceEstimate {
  bytes: number;
  algorithm: 'mesh' | 'ring';
  micros: number;
}

export interface CablingPlan {
  topology: PlannedTopology;
  cables: Cable[];
  max_hops: number;
  full_mesh_possible: boolean;
  /** Why a full mesh is impossible, in words; empty when it is possible. */
  full_mesh_reason: string;
  machines: { name: string; model: string; tb5_ports: number; used: number }[];
  allreduce: AllReduceEstimate[];
}

/*
 * Link figures the estimate assumes for one Thunderbolt 5 cable with RDMA: 80 Gb/s line rate,
 * of which ~6 GB/s is taken as usable per direction, and ~10 us per message per hop (reports
 * of JACCL over TB5 give single-digit to tens of microseconds). Replace them with `tandem topology`
 * measurements for a real cluster.
 */
export const assumedLink: LinkAssumption = { gbps: 6, hopMicros: 10 };

/** Per-cable figures the all-reduce estimate uses: usable GB/s per direction and microseconds per hop. */
export interface LinkAssumption {
  gbps: number;
  hopMicros: number;
}
const estimateSizes = [8 * 1024, 1 << 20, 64 << 20];

/**
 * Says which cables to connect, port by port: a full mesh when every machine has a port for
 * every other, else a ring through all machines, plus chords between machines with spare
 * ports (each chord joins the pair that is currently farthest apart, to cut the hops of
 * relayed traffic).
 */
export function planCabling(
  machines: readonly PlannedMachine[],
  link: LinkAssumption = assumedLink,
): CablingPlan {
  const n = machines.length;
  const free = machines.map((m) => [...m.model.tb5Ports]);
  const cables: Cable[] = [];
  const connect = (i: number, j: number): void => {
    const a = machines[i] as PlannedMachine;
    const b = machines[j] as PlannedMachine;
    cables.push({
      a: a.name,
      a_port: free[i]?.shift() as string,
      b: b.name,
      b_port: free[j]?.shift() as string,
    });
  };
  const short = machines.filter((m) => m.model.tb5Ports.length < n - 1);
  const meshPossible = n >= 1 && short.length === 0;
  const reason = meshPossible
    ? ''
    : `a full mesh of ${n} machines needs ${n - 1} Thunderbolt 5 ports on each; ` +
      short.map((m) => `${m.name} has ${m.model.tb5Ports.length}`).join(', ');
  let topology: PlannedTopology;
  if (n <= 1) topology = 'single';
  else if (meshPossible) {
    topology = 'full-mesh';
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) connect(i, j);
  } else {
    const lacking = machines.filter((m) => m.model.tb5Ports.length < 2);
    if (n === 2 || lacking.length > 0) {
      throw new TandemError(
        'TOPOLOGY_PLAN_IMPOSSIBLE',
        `topology plan: cannot cable ${n} machines over Thunderbolt 5: ${reason}`,
        {
          hint: 'a ring needs two Thunderbolt 5 ports on every machine; leave out machines without them or use --mode=tcp over Ethernet',
          details: { machines: lacking.map((m) => m.name) },
        },
      );
    }
    for (let i = 0; i < n; i++) connect(i, (i + 1) % n);
    topology = addChords(machines, free, cables, connect) > 0 ? 'ring-with-chords' : 'ring';
  }
  const graph = cablesToGraph(machines, cables);
  const hops = n <= 1 ? 0 : diameter(graph);
  return {
    topology,
    cables,
    max_hops: hops,
    full_mesh_possible: meshPossible,
    full_mesh_reason: reason,
    machines: machines.map((m, i) => ({
      name: m.name,
      model: m.model.id,
      tb5_ports: m.model.tb5Ports.length,
      used: m.model.tb5Ports.length - (free[i]?.length ?? 0),
    })),
    allreduce: n <= 1 ? [] : estimateSizes.map((bytes) => estimateAllReduce(topology, n, bytes, link)),
  };
}

function addChords(
  machines: readonly PlannedMachine[],
  free: string[][],
  cables: Cable[],
  connect: (i: number, j: number) => void,
): number {
  const n = machines.length;
  let added = 0;
  for (;;) {
    const graph = cablesToGraph(machines, cables);
    const dist = allPairsHops(graph);
    let best: [number, number] | undefined;
    let bestHops = 1;
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const d = dist[i]?.[j] ?? 0;
        if ((free[i]?.length ?? 0) > 0 && (free[j]?.length ?? 0) > 0 && d > bestHops) {
          best = [i, j];
          bestHops = d;
        }
      }
    }
    if (!best) return added;
    connect(best[0], best[1]);
    added++;
  }
}

function allPairsHops(graph: TopologyGraph): number[][] {
  const index = new Map(graph.hosts.map((h, i) => [h, i]));
  const n = graph.hosts.length;
  const d = Array.from({ length: n }, (_, i) =>
    Array.from({ length: n }, (_, j) => (i === j ? 0 : Infinity)),
  );
  for (const l of graph.links) {
    const i = index.get(l.a) as number;
    const j = index.get(l.b) as number;
    (d[i] as number[])[j] = 1;
    (d[j] as number[])[i] = 1;
  }
  for (let k = 0; k < n; k++)
    for (let i = 0; i < n; i++)
      for (let j = 0; j < n; j++) {
        const via = (d[i]?.[k] ?? Infinity) + (d[k]?.[j] ?? Infinity);
        if (via < (d[i]?.[j] ?? Infinity)) (d[i] as number[])[j] = via;
      }
  return d;
}

export function cablesToGraph(machines: readonly PlannedMachine[], cables: readonly Cable[]): TopologyGraph {
  const links: Link[] = cables.map((c) => ({
    a: c.a,
    aPort: c.a_port,
    b: c.b,
    bPort: c.b_port,
    kind: 'tb5',
    speedGbps: 80,
  }));
  return { hosts: machines.map((m) => m.name), links };
}

/**
 * Alpha-beta estimate. Mesh (every pair cabled): reduce-scatter then all-gather, each one step
 * with all cables busy at once, so 2 * (alpha + (M/n)/B). Ring: 2(n-1) steps of M/n each,
 * bidirectional so each direction carries half: 2(n-1) * (alpha + (M/n)/(2B)).
 */
export function estimateAllReduce(
  topology: PlannedTopology,
  n: number,
  bytes: number,
  link: LinkAssumption = assumedLink,
): AllReduceEstimate {
  const perUs = link.gbps * 1e3; // bytes per microsecond
  const hopMicros = link.hopMicros;
  const chunk = bytes / n;
  if (topology === 'full-mesh') return { bytes, algorithm: 'mesh', micros: 2 * (hopMicros + chunk / perUs) };
  return { bytes, algorithm: 'ring', micros: 2 * (n - 1) * (hopMicros + chunk / (2 * perUs)) };
}
