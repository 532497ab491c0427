import { dequantize, quantize } from '../../kernels/quant/index.js';
import { writeGguf, gv } from './gguf-writer.js';
import { planFor, tensorF32, type MakeModelOptions } from './make-model.js';

/**
 * Writes the F32 twin of a generated model: the same metadata and tensors, every weight
 * the dequantized value of what `makeModel` stores for `o.type`. llama.cpp must give the
 * twin and the quantized file (nearly) the same logits, which proves the quantized bytes
 * are laid out the way ggml reads them.
 */
export async function writeF32Twin(path: string, o: MakeModelOptions): Promise<void> {
  const plan = planFor(o);
  const seed = o.seed ?? 0;
  const metadata = new Map(plan.metadata);
  metadata.set('general.file_type', gv.u32(0));
  metadata.delete('general.quantization_version');
  const f32 = plan.tensors.map((t) => ({ ...t, type: 0 }));
  await writeGguf(path, metadata, f32, (_layout, i) => {
    const t = plan.tensors[i]!;
    const x = tensorF32(t, seed, o.std ?? 0.02);
    return quantize(0, dequantize(t.type, quantize(t.type, x), x.length));
  });
}
