import { Gauge, type Registry } from 'prom-client';
import type { ExpertLoad } from '../engine/index.js';

/**
 * A mixture of experts' routing on /metrics, from the served model's counters
 * (ExpertLoad): tokens routed to each expert of each MoE layer since load, and each
 * expert's share of its layer's recent choices (the decaying window a placement by load
 * follows). Absent for a dense model or one served over nodes (their counters stay on them).
 */
export class ExpertMetrics {
  private load: ExpertLoad | undefined;

  constructor(registry: Registry) {
    const read = (): ExpertLoad | undefined => this.load;
    void new Gauge({
      name: 'tandem:expert_routed_tokens',
      help: 'Tokens routed to each expert of each MoE layer since the model was loaded (top-k choices).',
      labelNames: ['layer', 'expert'],
      registers: [registry],
      collect() {
        const l = read();
        if (!l) return;
        for (let layer = 0; layer < l.layers; layer++)
          for (let e = 0; e < l.experts; e++)
            this.set({ layer: String(layer), expert: String(e) }, l.totals[layer * l.experts + e]!);
      },
    });
    void new Gauge({
      name: 'tandem:expert_load_share',
      help: "Each expert's share of its layer's recent routing choices (a window halving every 4096 choices).",
      labelNames: ['layer', 'expert'],
      registers: [registry],
      collect() {
        const l = read();
        if (!l) return;
        for (let layer = 0; layer < l.layers; layer++) {
          const shares = l.shares(layer, 'recent');
          shares.forEach((v, e) => this.set({ layer: String(layer), expert: String(e) }, v));
        }
      },
    });
  }

  setLoad(load: ExpertLoad | undefined): void {
    this.load = load;
  }
}
