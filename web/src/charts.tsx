import type { History } from './history.js';
import { LineChart } from './line-chart.js';

/** Live charts: tokens/s, the TTFT of each request, and the queue against the running slots. */
export function Charts({ history }: { history: History }) {
  return (
    <div class="charts">
      <figure>
        <figcaption>tokens/s generated</figcaption>
        <LineChart series={[{ label: 'tok/s', color: '#4fa3ff' }]} data={history.rate} />
      </figure>
      <figure>
        <figcaption>time to first token (s), per request</figcaption>
        <LineChart series={[{ label: 'TTFT s', color: '#f5a623', points: true }]} data={history.ttft} />
      </figure>
      <figure>
        <figcaption>queue depth and running slots</figcaption>
        <LineChart
          series={[
            { label: 'waiting', color: '#e5534b' },
            { label: 'running', color: '#57ab5a' },
          ]}
          data={history.queue}
        />
      </figure>
    </div>
  );
}
