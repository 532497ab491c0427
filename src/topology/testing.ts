import type { Link, TopologyGraph } from './model.js';

/**
 * Builds a graph from `"a-b b-c c-a"` for tests and examples: each token is a cable, ports are
 * numbered per host in order of appearance (`p0`, `p1`, ...).
 */
export function graphOf(spec: string, hosts?: readonly string[]): TopologyGraph {
  const next = new Map<string, number>();
  const port = (h: string): string => {
    const k = next.get(h) ?? 0;
    next.set(h, k + 1);
    return `p${k}`;
  };
  const links: Link[] = [];
  const seen: string[] = [...(hosts ?? [])];
  for (const token of spec.split(/\s+/).filter((t) => t !== '')) {
    const [a, b] = token.split('-') as [string, string];
    for (const h of [a, b]) if (!seen.includes(h)) seen.push(h);
    links.push({ a, aPort: port(a), b, bPort: port(b), kind: 'ethernet' });
  }
  return { hosts: seen, links };
}
