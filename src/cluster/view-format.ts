// How the figures of GET /v1/cluster read as short text. No imports: the dashboard (web/) and
// `tandem top` both show them, the same way.
import type { LinkView } from './cluster-view.js';

/** A one-way latency in µs as `52 µs` or `3.2 ms`; `-` when not measured. */
export function latencyText(us: number | null): string {
  if (us === null) return '-';
  return us < 1000 ? `${us.toFixed(0)} µs` : `${(us / 1000).toFixed(1)} ms`;
}

/** A measured bandwidth in MB/s (1e6 bytes) as `850 MB/s` or `12.5 GB/s`; `-` when not measured. */
export function bandwidthText(mbps: number | null): string {
  if (mbps === null) return '-';
  return mbps < 1000 ? `${mbps.toFixed(mbps < 10 ? 1 : 0)} MB/s` : `${(mbps / 1000).toFixed(1)} GB/s`;
}

/** A live rate in bytes per second as `0 B/s`, `3.2 kB/s`, `41 MB/s` (powers of 1000, like the bandwidth). */
export function rateText(bytesPerS: number): string {
  if (bytesPerS < 1000) return `${bytesPerS.toFixed(0)} B/s`;
  if (bytesPerS < 1e6) return `${(bytesPerS / 1e3).toFixed(1)} kB/s`;
  if (bytesPerS < 1e9) return `${(bytesPerS / 1e6).toFixed(1)} MB/s`;
  return `${(bytesPerS / 1e9).toFixed(1)} GB/s`;
}

/** A share 0..1 as a whole percentage; `-` when unknown. */
export function shareText(share: number | null): string {
  return share === null ? '-' : `${Math.round(share * 100)}%`;
}

/** A link's figures on one line: `tcp · 52 µs · 850 MB/s · 3.2 kB/s` (the unmeasured ones left out). */
export function linkText(
  l: Pick<LinkView, 'kind' | 'latency_us' | 'bandwidth_MBps' | 'bytes_per_s'>,
): string {
  return [
    l.kind,
    l.latency_us !== null ? latencyText(l.latency_us) : undefined,
    l.bandwidth_MBps !== null ? bandwidthText(l.bandwidth_MBps) : undefined,
    rateText(l.bytes_per_s),
  ]
    .filter((x) => x !== undefined)
    .join(' · ');
}
