// A child of concurrentStreamSamples (calibrate-together.ts). Request on stdin:
// { threads, count, dir, id, waitMs }. It sets up the stream sampler on `threads`, writes
// `ready-<id>` into `dir`, waits (at most waitMs) for `go` there, then prints its `count`
// samples (bytes a second each) as one JSON array.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createKernels } from '../kernels/index.js';
import { openStreamSampler } from './calibrate.js';

let text = '';
for await (const chunk of process.stdin) text += String(chunk);
const req = JSON.parse(text) as { threads: number; count: number; dir: string; id: number; waitMs: number };
const kernels = await createKernels({ threads: req.threads });
try {
  const sample = openStreamSampler(kernels);
  writeFileSync(join(req.dir, `ready-${req.id}`), '');
  const until = Date.now() + req.waitMs;
  while (!existsSync(join(req.dir, 'go'))) {
    if (Date.now() > until) throw new Error(`no go within ${req.waitMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
  const samples = Array.from({ length: req.count }, () => sample());
  process.stdout.write(`${JSON.stringify(samples)}\n`);
} finally {
  await kernels.close();
}
