import type uPlot from 'uplot';
import type { Snapshot } from './types.js';

/** Seconds of history the charts keep. */
const KEEP_S = 120;

/** The charts' series, in uPlot's column layout (x: Unix seconds). */
export interface History {
  rate: uPlot.AlignedData;
  ttft: uPlot.AlignedData;
  queue: uPlot.AlignedData;
}

export const emptyHistory: History = { rate: [[], []], ttft: [[], []], queue: [[], [], []] };

function keep(columns: (number | null)[][], fromS: number): uPlot.AlignedData {
  const x = columns[0] as number[];
  let first = 0;
  while (first < x.length && (x[first] as number) < fromS) first++;
  return columns.map((c) => c.slice(first)) as [number[], ...(number | null)[][]];
}

/**
 * The TTFT columns with the requests new in `s` as points at their times, and the snapshot's
 * time with no value (so that the chart spans the same window as the others), sorted by time.
 */
function addTtfts(ttft: uPlot.AlignedData, s: Snapshot): (number | null)[][] {
  const seen = new Set(ttft[0] as number[]);
  const points: [number, number | null][] = (ttft[0] as number[]).map((x, i) => [
    x,
    (ttft[1] as (number | null)[])[i] ?? null,
  ]);
  for (const r of s.recent_ttfts) if (!seen.has(r.at_ms / 1000)) points.push([r.at_ms / 1000, r.ttft_s]);
  points.push([s.at_ms / 1000, null]);
  points.sort((a, b) => a[0] - b[0]);
  return [points.map((p) => p[0]), points.map((p) => p[1])];
}

/** The history with `s` added: a point a second for tok/s and the queue, one per request for TTFT. */
export function addSnapshot(h: History, s: Snapshot): History {
  const t = s.at_ms / 1000;
  const fromS = t - KEEP_S;
  const [rx, ry] = h.rate as [number[], number[]];
  const [qx, qWait, qRun] = h.queue as [number[], number[], number[]];
  return {
    rate: keep(
      [
        [...rx, t],
        [...ry, s.tokens_per_s],
      ],
      fromS,
    ),
    queue: keep(
      [
        [...qx, t],
        [...qWait, s.queue_depth],
        [...qRun, s.running],
      ],
      fromS,
    ),
    ttft: keep(addTtfts(h.ttft, s), fromS),
  };
}
