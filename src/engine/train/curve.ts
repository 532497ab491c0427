import { writeFileAtomically } from '../format/atomic-file.js';
import type { CurvePoint } from './checkpoint.js';

/** The loss curve as CSV: a header `step,loss,lr`, then one row per update (doubles printed exactly). */
export function curveCsv(curve: readonly CurvePoint[]): string {
  return ['step,loss,lr', ...curve.map((p) => `${p.step},${p.loss},${p.lr}`)].join('\n') + '\n';
}

/** Writes `text` to `path` through a temporary file renamed over it. */
export async function writeTextAtomically(path: string, text: string): Promise<void> {
  await writeFileAtomically(path, async (file) => {
    await file.writeFile(text);
  });
}
