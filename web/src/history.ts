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

function keep(columns: number[][], fromS: number): uPlot.AlignedData {
  const x = columns[0] as number[];
  let first = 0;
  while (first < x.length && (x[first] as number) < fromS) first++;
  return columns.map((c) => c.slice(first)) as [number[], ...number[][]];
}

/** The history with `s` added: a point a second for tok/s and the queue, one per request for TTFT. */
export function addSnapshot(h: History, s: Snapshot): History {
  const t = s.at_ms / 1000;
  const fromS = t - KEEP_S;
  const [rx, ry] = h.rate as [number[], number[]];
  const [qx, qWait, qRun] = h.queue as [number[], number[], number[]];
  const known = new Set(h.ttft[0] as number[]);
  const fresh = s.recent_ttfts.filter((r) => !known.has(r.at_ms / 1000));
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
    ttft: keep(
      [
        [...(h.ttft[0] as number[]), ...fresh.map((r) => r.at_ms / 1000)],
        [...(h.ttft[1] as number[]), ...fresh.map((r) => r.ttft_s)],
      ],
      fromS,
    ),
  };
}
