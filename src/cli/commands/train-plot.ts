import type { CurvePoint } from '../../engine/train/index.js';

/**
 * The loss curve as an SVG line chart, drawn by Vega-Lite (compiled to a Vega spec and
 * rendered headless by Vega's SVG renderer; no browser or canvas). Loaded lazily: only
 * `tandem train --plot` pays for it.
 */
export async function curveSvg(curve: readonly CurvePoint[], title: string): Promise<string> {
  const [{ compile }, vega] = await Promise.all([import('vega-lite'), import('vega')]);
  const spec = compile({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: 560,
    height: 280,
    background: 'white',
    data: { values: curve.map((p) => ({ step: p.step, loss: p.loss })) },
    mark: { type: 'line', strokeWidth: 1.5 },
    encoding: {
      x: { field: 'step', type: 'quantitative', title: 'update' },
      y: { field: 'loss', type: 'quantitative', title: 'training loss (nats/token)', scale: { zero: false } },
    },
  }).spec;
  const view = new vega.View(vega.parse(spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
