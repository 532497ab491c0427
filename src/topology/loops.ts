import type { Link, TopologyGraph } from './model.js';

/** Which interfaces each host's bridge (macOS `bridge0`, the Thunderbolt Bridge) forwards between. */
export type BridgeMembership = ReadonlyMap<string, ReadonlySet<string>>;

export interface BridgeLoop {
  /** Hosts around the loop, first host repeated at the end. */
  hosts: string[];
  /** The cables that form the loop. */
  links: Link[];
}

/**
 * Loops a layer-2 bridge would turn into a broadcast storm. A host forwards between two cables
 * only when both of its ports are members of its bridge, so a storm needs a cycle made only of
 * links whose two ends are bridged. Each such cycle is reported once (one per cable that closes
 * a cycle in a spanning forest), so an empty result means no storm is possible.
 */
export function findBridgeLoops(graph: TopologyGraph, bridges: BridgeMembership): BridgeLoop[] {
  const bridged = (host: string, port: string): boolean => bridges.get(host)?.has(port) ?? false;
  const parent = new Map<string, string>(graph.hosts.map((h) => [h, h]));
  const find = (h: string): string => {
    let r = h;
    while (parent.get(r) !== r) r = parent.get(r) as string;
    parent.set(h, r);
    return r;
  };
  const tree: Link[] = [];
  const loops: BridgeLoop[] = [];
  for (const link of graph.links) {
    if (!bridged(link.a, link.aPort) || !bridged(link.b, link.bPort)) continue;
    const ra = find(link.a);
    const rb = find(link.b);
    if (ra !== rb) {
      parent.set(ra, rb);
      tree.push(link);
      continue;
    }
    const path = treePath(tree, link.b, link.a);
    loops.push({ hosts: [...path.hosts, link.b], links: [...path.links, link] });
  }
  return loops;
}

/** The unique path between two hosts in a forest of links. */
function treePath(tree: readonly Link[], from: string, to: string): { hosts: string[]; links: Link[] } {
  const back = new Map<string, { prev: string; link: Link }>();
  const seen = new Set([from]);
  const queue = [from];
  for (let i = 0; i < queue.length; i++) {
    const h = queue[i] as string;
    for (const l of tree) {
      const other = l.a === h ? l.b : l.b === h ? l.a : undefined;
      if (other === undefined || seen.has(other)) continue;
      seen.add(other);
      back.set(other, { prev: h, link: l });
      queue.push(other);
    }
  }
  const hosts = [to];
  const links: Link[] = [];
  while (hosts[0] !== from) {
    const step = back.get(hosts[0] as string);
    if (!step) break;
    hosts.unshift(step.prev);
    links.unshift(step.link);
  }
  return { hosts, links };
}
