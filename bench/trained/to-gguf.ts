// Writes the weights train.py produced as a GGUF of make-model's llama layout (its metadata and
// vocabulary for the trained shape), each tensor quantized to the file type's.
//   npx tsx bench/trained/to-gguf.ts TRAIN_DIR OUT.gguf [--type f32|f16|q8_0|...]
import { openSync, readFileSync, readSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gv, writeGguf } from '../../src/engine/format/gguf-writer.js';
import { planFor } from '../../src/engine/format/make-model.js';
import { fileTypes, type FileTypeName } from '../../src/engine/format/model-plan.js';
import { quantize } from '../../src/kernels/quant/quantize.js';
import { TRAINED_SHAPE } from './shape.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { type: { type: 'string', default: 'f32' } },
});
const [dir, out] = positionals;
const type = values.type as FileTypeName;
if (dir === undefined || out === undefined || !(type in fileTypes)) {
  console.error(
    `usage: npx tsx bench/trained/to-gguf.ts TRAIN_DIR OUT.gguf [--type ${Object.keys(fileTypes).join('|')}]`,
  );
  process.exit(64);
}

interface Manifest {
  steps: number;
  held_out_loss: number;
  seed: number;
  tensors: { name: string; shape: number[] }[];
}
const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as Manifest;
const at = new Map<string, { offset: number; count: number; shape: number[] }>();
let offset = 0;
for (const t of manifest.tensors) {
  const count = t.shape.reduce((a, b) => a * b, 1);
  at.set(t.name, { offset, count, shape: t.shape });
  offset += count * 4;
}

const plan = planFor({ arch: 'llama', shape: TRAINED_SHAPE, type });
plan.metadata.set('general.name', gv.str('tandem trained small llama'));
plan.metadata.set(
  'general.description',
  gv.str(
    `trained by bench/trained/train.py on text found on the machine (seed ${manifest.seed}, ${manifest.steps} steps, held-out loss ${manifest.held_out_loss.toFixed(3)} nats/token)`,
  ),
);
const fd = openSync(join(dir, 'weights.f32'), 'r');
try {
  const { bytes } = await writeGguf(out, plan.metadata, plan.tensors, (layout) => {
    const src = at.get(layout.name);
    // torch's [out, in] is ggml's dims [in, out] reversed
    if (src === undefined || src.shape.join(',') !== [...layout.dims].reverse().join(',')) {
      throw new Error(
        `${layout.name}: the trained weights have ${src ? `shape [${src.shape.join(', ')}]` : 'no such tensor'}, the layout wants [${[...layout.dims].reverse().join(', ')}]`,
      );
    }
    const values = new Float32Array(src.count);
    readSync(fd, new Uint8Array(values.buffer), 0, src.count * 4, src.offset);
    return quantize(layout.type, values);
  });
  console.log(`wrote ${out} (${type}, ${bytes} bytes)`);
} finally {
  closeSync(fd);
}
