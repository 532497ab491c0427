import type { DashboardSnapshot } from '../../api/dashboard-snapshot.js';
import type { LinkView, MemberView } from '../../cluster/cluster-view.js';
import { bandwidthText, latencyText, rateText, shareText } from '../../cluster/view-format.js';

/** Events shown under the tables (the latest). */
const EVENTS = 6;

/** Bytes as B, KiB, MiB or GiB, one decimal. */
function bytesText(n: number | null): string {
  if (n === null) return '-';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u] as string}`;
}

/** Rows as columns padded to their widest cell, two spaces apart, each line indented by two. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    '  ' +
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] as number)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

function memberRow(m: MemberView): string[] {
  return [
    m.id,
    m.state,
    bytesText(m.memory_bytes),
    m.speed !== null ? m.speed.toFixed(2) : '-',
    shareText(m.compute_share),
    shareText(m.comm_share),
    `${m.last_heartbeat_ms} ms`,
    m.address,
  ];
}

function linkRow(l: LinkView): string[] {
  return [
    l.from,
    l.to,
    l.kind,
    latencyText(l.latency_us),
    bandwidthText(l.bandwidth_MBps),
    rateText(l.bytes_per_s),
    bytesText(l.bytes_sent),
    bytesText(l.bytes_received),
    l.state,
  ];
}

/**
 * The screen `tandem top` draws from one dashboard snapshot: the model and its figures
 * (tokens/s, running, queue depth), the placement, the members (state, memory, speed, compute
 * and communication shares of each token), the links (kind, measured latency and bandwidth,
 * live bytes/s, totals) and the latest events. Lines are cut at `width` columns when given.
 */
export function renderTop(s: DashboardSnapshot, o: { url: string; width?: number }): string {
  const at = new Date(s.at_ms).toISOString().slice(11, 19);
  const out = [
    `tandem top · ${o.url} · ${s.model ?? '(no model yet)'} · ${s.status} · ${at} UTC`,
    `${s.tokens_per_s.toFixed(1)} tok/s (last ${s.rate_window_s} s) · ${s.running}/${s.slots} running · ` +
      `${s.queue_depth} waiting · ${s.generated_tokens_total} tokens generated, ${s.prompt_tokens_total} prompt`,
    '',
  ];
  const c = s.cluster;
  if (!c) {
    out.push('the model is loading: no cluster to show yet');
  } else {
    const p = c.placement;
    out.push(
      p
        ? `placement: ${p.parallel} over ${p.provider} · placements ${c.placements} · re-placements ${c.replacements}${p.reason ? ` · ${p.reason}` : ''}`
        : `placement: none${c.waiting ? ` (${c.waiting})` : ''}`,
    );
    for (const r of p?.ranks ?? []) out.push(`  ${r.id}: ${r.holds}`);
    out.push('', `members (${c.members.length})`);
    out.push(
      ...table(
        ['ID', 'STATE', 'MEMORY', 'SPEED', 'COMPUTE', 'COMM', 'HEARD', 'ADDRESS'],
        c.members.map(memberRow),
      ),
    );
    out.push('', `links (${c.links.length})`);
    if (c.links.length === 0) out.push('  none reported yet');
    else
      out.push(
        ...table(
          ['FROM', 'TO', 'KIND', 'LATENCY', 'BANDWIDTH', 'LIVE', 'SENT', 'RECEIVED', 'STATE'],
          c.links.map(linkRow),
        ),
      );
    const events = c.events.slice(-EVENTS);
    if (events.length > 0) {
      out.push('', 'events');
      for (const e of events)
        out.push(`  ${new Date(e.atMs).toISOString().slice(11, 19)} ${e.kind.padEnd(12)} ${e.message}`);
    }
  }
  const width = o.width;
  return (width ? out.map((l) => (l.length > width ? l.slice(0, width) : l)) : out).join('\n') + '\n';
}
