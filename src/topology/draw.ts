import { classify, type Classification } from './classify.js';
import { adjacency, type TopologyGraph } from './model.js';

/** The shape of the graph in a few terminal lines: a ring closes back, a line runs, a star fans out. */
export function drawShape(graph: TopologyGraph, c: Classification = classify(graph)): string[] {
  const joint = ' ── ';
  if (c.kind === 'single') return [`[${graph.hosts[0] ?? ''}]`];
  if (c.kind === 'ring') {
    const top = `┌─ ${c.order.map((h) => `[${h}]`).join(joint)} ─┐`;
    return [top, `└${'─'.repeat(top.length - 2)}┘`];
  }
  if (c.kind === 'line') return [c.order.map((h) => `[${h}]`).join(joint)];
  if (c.kind === 'star' && c.hub !== undefined) {
    const leaves = graph.hosts.filter((h) => h !== c.hub).sort();
    const cells = leaves.map((h) => `[${h}]`);
    const row = cells.join('  ');
    const hub = `[${c.hub}]`;
    const marks = new Array<string>(row.length).fill('─');
    let at = 0;
    const centres = cells.map((cell) => {
      const mid = at + Math.floor(cell.length / 2);
      at += cell.length + 2;
      return mid;
    });
    const first = centres[0] ?? 0;
    const last = centres[centres.length - 1] ?? 0;
    for (const m of centres) marks[m] = '┬';
    marks[first] = '┌';
    marks[last] = '┐';
    const middle = Math.floor((first + last) / 2);
    marks[middle] = marks[middle] === '┬' ? '┼' : '┴';
    const bar = marks
      .slice(first, last + 1)
      .join('')
      .padStart(last + 1);
    return [hub.padStart(middle + Math.ceil(hub.length / 2)), bar, row];
  }
  return matrix(graph);
}

/** Adjacency matrix: one row per host, `●` where a cable joins the pair. */
export function matrix(graph: TopologyGraph): string[] {
  const adj = adjacency(graph);
  const width = Math.max(...graph.hosts.map((h) => h.length));
  const labels = graph.hosts.map((_, i) => String(i));
  const lines = ['  '.padEnd(width + 2) + labels.map((l) => l.padStart(2)).join(' ')];
  graph.hosts.forEach((h, i) => {
    const cells = graph.hosts.map((o) => (o === h ? '╲' : adj.get(h)?.has(o) ? '●' : '·').padStart(2));
    lines.push(`${labels[i]?.padStart(2)} ${h.padEnd(width)} ${cells.join(' ')}`);
  });
  return lines;
}

const fmt = (v: number | undefined, unit: string, digits: number): string =>
  v === undefined ? '-' : `${v.toFixed(digits)} ${unit}`;

/** The full text `tandem topology` prints: class, drawing, and one row per link. */
export function renderTopology(graph: TopologyGraph): string {
  const c = classify(graph);
  const diam =
    c.diameter === Infinity ? 'unreachable hosts' : `max ${c.diameter} hop${c.diameter === 1 ? '' : 's'}`;
  const lines = [
    `topology: ${c.kind} (${graph.hosts.length} hosts, ${graph.links.length} links, ${diam})`,
    '',
  ];
  lines.push(...drawShape(graph, c).map((l) => '  ' + l), '');
  const rows = graph.links.map((l) => [
    `${l.a}:${l.aPort}`,
    `${l.b}:${l.bPort}`,
    l.kind,
    fmt(l.latencyUs, 'us', 1),
    fmt(l.bandwidthGBps, 'GB/s', 2),
  ]);
  const head = ['from', 'to', 'kind', 'latency', 'bandwidth'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (r: string[]): string =>
    '  ' +
    r
      .map((cell, i) => cell.padEnd(widths[i] as number))
      .join('  ')
      .trimEnd();
  lines.push(line(head), ...rows.map(line));
  if (c.missingPairs.length > 0 && c.kind !== 'disconnected') {
    lines.push('', `  ${c.missingPairs.length} pair(s) without a cable are relayed through a neighbour`);
  }
  return lines.join('\n') + '\n';
}
