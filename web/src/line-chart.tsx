import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export interface ChartSeries {
  label: string;
  color: string;
  /** Draw the values as points only (one per request, not a continuous series). */
  points?: boolean;
}

/** A uPlot chart over time (x: Unix seconds) that follows `data` as it changes. */
export function LineChart({ series, data }: { series: ChartSeries[]; data: uPlot.AlignedData }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!box.current) return;
    const options: uPlot.Options = {
      width: 380,
      height: 150,
      legend: { show: true },
      series: [
        {},
        ...series.map((s): uPlot.Series => ({
          label: s.label,
          stroke: s.color,
          width: s.points ? 0 : 2,
          points: { show: s.points ?? false, size: 6, fill: s.color },
        })),
      ],
      // at least a minute across: a lone point (one request's TTFT) would otherwise span years
      scales: {
        x: { time: true, range: (_u, min, max) => (max - min < 60 ? [max - 60, max + 1] : [min, max]) },
      },
      axes: [{ stroke: '#999' }, { stroke: '#999' }],
    };
    plot.current = new uPlot(options, data, box.current);
    return () => plot.current?.destroy();
    // made once (the series never change); the data follows in the effect below
  }, []);
  useEffect(() => plot.current?.setData(data), [data]);
  return <div class="chart" ref={box} />;
}
