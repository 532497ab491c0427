import { availableParallelism } from 'node:os';
import { TandemError } from '../errors/index.js';
import { openDevice, type Device, type Listener, type ProviderName } from '../fabric/index.js';
import { loadFastReduce } from '../kernels/reduce-native.js';
import { fullMeshGraph } from '../topology/rank-graph.js';
import { shortestRoutes } from '../topology/routing.js';
import { badArg } from './call-args.js';
import { Communicator } from './communicator.js';
import { adjacency, graphOf, type Graph, type TopologyKind } from './graph.js';
import { connectWorld, type Rendezvous } from './rendezvous.js';
import { Router } from './router/index.js';

export interface CommunicatorOptions {
  rank: number;
  size: number;
  /** The fabric provider to open (default loopback), unless `device` is given. */
  provider?: ProviderName;
  device?: Device;
  /** Who is where; may be omitted for size 1. */
  rendezvous?: Rendezvous;
  /** Direct links: a graph or a named topology (default: full mesh). */
  graph?: Graph | TopologyKind;
  /** Cluster secret for the fabric's authenticated connection setup. */
  secret?: string;
  /** Deadline for every wait inside an operation (default 30000 ms). */
  timeoutMs?: number;
  /** Deadline for connecting the world (default 30000 ms). */
  connectTimeoutMs?: number;
  listener?: Listener;
  onListening?: (address: string) => void;
  /** Ends connecting the world early (its waits reject): a coordinator giving up on a load. */
  signal?: AbortSignal;
  /** Connections per linked pair; ring algorithms stripe over them (default 1). */
  wires?: number;
  /** Receive slots per link and payload bytes per fragment (defaults 8 and 256 KiB). */
  slots?: number;
  slotBytes?: number;
  /**
   * Compute threads each rank of this host runs (default 1). Waits busy-poll only when
   * ranks on this host x threads <= cores: a spinner would take a core a peer computes on.
   */
  threadsPerRank?: number;
}

/**
 * Whether waits may busy-poll on a host running `ranks` ranks of `threads` compute threads
 * each: only when every thread has a core of its own (a spinner would take a core a peer
 * computes on, and then wait the longer for it).
 */
export function mayBusyPoll(ranks: number, threads: number, cores = availableParallelism()): boolean {
  return ranks * Math.max(1, threads) <= cores;
}

/** How many ranks of the world run on this host, as far as the addresses tell (at least 1). */
function ranksOnThisHost(
  provider: string,
  rendezvous: Rendezvous | undefined,
  rank: number,
  size: number,
): number {
  // loopback and shm worlds are one host; tcp and rdma ranks are where their addresses say
  if ((provider !== 'tcp' && provider !== 'rdma') || rendezvous === undefined) return size;
  const hostOf = (a: string): string => a.slice(0, Math.max(0, a.lastIndexOf(':')));
  if (rendezvous.kind === 'hosts') {
    const mine = hostOf(rendezvous.addresses[rank] ?? '');
    return rendezvous.addresses.filter((a) => hostOf(a) === mine).length || 1;
  }
  return /^(127\.|localhost$|\[?::1\]?$)/.test(rendezvous.host ?? hostOf(rendezvous.address)) ? size : 1;
}

/** Connects rank `rank` of a world of `size` and returns its communicator. */
export async function createCommunicator(options: CommunicatorOptions): Promise<Communicator> {
  const { rank, size } = options;
  if (
    !Number.isInteger(size) ||
    size < 1 ||
    size > 65535 ||
    !Number.isInteger(rank) ||
    rank < 0 ||
    rank >= size
  ) {
    throw badArg(`rank ${rank} of size ${size} is not valid`, 'pass 0 <= rank < size <= 65535');
  }
  const graph =
    typeof options.graph === 'string' ? graphOf(options.graph, size) : (options.graph ?? fullMeshGraph(size));
  if (graph.size !== size)
    throw new TandemError('COLL_BAD_GRAPH', `graph has ${graph.size} ranks, the world ${size}`, {
      hint: 'pass a graph of the world size',
    });
  const adj = adjacency(graph);
  const routes = shortestRoutes(adj);
  const wires = options.wires ?? 1;
  if (!Number.isInteger(wires) || wires < 1 || wires > 16)
    throw badArg(
      `wires must be an integer in 1..16, got ${wires}`,
      'use 1 (default) to 4 connections per linked pair',
    );
  await loadFastReduce(); // reductions in C when a compiler is here, else WebAssembly (else reduce.ts)
  const device = options.device ?? (await openDevice(options.provider ?? 'loopback'));
  try {
    const pd = device.allocPd();
    const cq = device.createCq();
    let links: Awaited<ReturnType<typeof connectWorld>> = [];
    if (size > 1) {
      if (options.rendezvous === undefined)
        throw badArg(
          `a world of ${size} ranks needs a rendezvous`,
          "pass rendezvous: { kind: 'root', address: 'host:port' }",
        );
      links = await connectWorld({
        rank,
        size,
        device,
        pd,
        cq,
        rendezvous: options.rendezvous,
        adj,
        secret: options.secret ?? 'tandem',
        timeoutMs: options.connectTimeoutMs ?? 30_000,
        wires,
        ...(options.listener ? { listener: options.listener } : {}),
        ...(options.onListening ? { onListening: options.onListening } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
      });
    }
    const spin = mayBusyPoll(
      ranksOnThisHost(device.provider, options.rendezvous, rank, size),
      options.threadsPerRank ?? 1,
    );
    const router = new Router({
      rank,
      size,
      links,
      routes,
      cq,
      spin,
      ...(options.slots ? { slots: options.slots } : {}),
      ...(options.slotBytes ? { slotBytes: options.slotBytes } : {}),
    });
    router.start();
    const members = Array.from({ length: size }, (_, i) => i);
    return new Communicator(
      rank,
      size,
      members,
      1,
      router,
      options.timeoutMs ?? 30_000,
      graph,
      { device: options.device ? undefined : device },
      wires,
    );
  } catch (e) {
    if (!options.device) await device.close().catch(() => undefined);
    throw e;
  }
}
