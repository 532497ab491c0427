// Held-out loss of trained models of one shape, all measured by the same code: each GGUF's
// tensors are read (dequantized when quantized) into the training layout, and the training
// forward pass computes the mean next-token cross-entropy over consecutive windows of SEQ + 1
// tokens of the held-out text (tokenized as `tandem train` tokenizes, BOS first; the last
// partial window dropped). A MODEL ending in .ckpt is a `tandem train` checkpoint (its weights).
//   npx tsx bench/train-heldout.ts eval HELD_OUT.txt MODEL.gguf... [--shape shipped] [--seq 128]
//   npx tsx bench/train-heldout.ts tokens TEXT.txt OUT.u16 [--shape shipped]   (for bench/train-torch-run.py)
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { FileSource } from '../src/engine/format/byte-source.js';
import { parseGguf } from '../src/engine/format/gguf-reader.js';
import { LlamaGrad } from '../src/engine/train/llama-grad.js';
import { paramLayout, type ParamLayout } from '../src/engine/train/params.js';
import { loadCheckpoint, trainingTokenizer, trainShape } from '../src/engine/train/index.js';
import { loadGemm } from '../src/kernels/backward/load-gemm.js';
import { dequantize } from '../src/kernels/quant/quantize.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { shape: { type: 'string', default: 'shipped' }, seq: { type: 'string', default: '128' } },
});
const [mode, text, ...rest] = positionals;
const layout = paramLayout(trainShape(values.shape));
const seq = Number(values.seq);

function tokensOf(path: string): Int32Array {
  return Int32Array.from(trainingTokenizer(layout).encode(readFileSync(path, 'utf8'), { addBos: true }));
}

/** The GGUF's weights in the training layout (every tensor the layout names, dequantized). */
function weightsOf(path: string, l: ParamLayout): Float32Array {
  const source = new FileSource(path);
  const header = parseGguf(source);
  const bytes = readFileSync(path);
  const out = new Float32Array(l.total);
  for (const e of l.entries) {
    const t = header.tensors.find((x) => x.name === e.name);
    if (t === undefined || t.elements !== e.size)
      throw new Error(
        `${path}: ${e.name} is ${t ? `${t.elements} values` : 'missing'}, the shape needs ${e.size}`,
      );
    const src = bytes.subarray(t.fileOffset, t.fileOffset + t.byteLength);
    dequantize(t.type.id, src, e.size, out.subarray(e.offset, e.offset + e.size));
  }
  return out;
}

if (mode === 'tokens' && text !== undefined && rest[0] !== undefined) {
  const ids = tokensOf(text);
  writeFileSync(rest[0], Uint16Array.from(ids));
  console.log(`${ids.length} tokens of ${text} to ${rest[0]} (u16)`);
} else if (mode === 'eval' && text !== undefined && rest.length > 0) {
  const tokens = tokensOf(text);
  const windows = Math.floor(tokens.length / (seq + 1));
  const gemm = await loadGemm('native');
  for (const path of rest) {
    // a checkpoint of `tandem train` (its weights so far) or a GGUF
    const weights = path.endsWith('.ckpt') ? (await loadCheckpoint(path)).weights : weightsOf(path, layout);
    const model = new LlamaGrad(layout, weights, gemm);
    let sum = 0;
    // 8 windows per forward pass: the same sum as one window at a time, in bounded memory
    for (let w = 0; w < windows; w += 8) {
      const rows = Math.min(8, windows - w);
      const batch = tokens.subarray(w * (seq + 1), (w + rows) * (seq + 1));
      sum += model.loss(batch, rows, seq) * rows;
    }
    console.log(
      JSON.stringify({ model: path, held_out_loss: sum / windows, windows, tokens: windows * seq, seq }),
    );
  }
} else {
  console.error(
    'usage: npx tsx bench/train-heldout.ts eval HELD_OUT.txt MODEL.gguf... [--shape S] [--seq N]\n' +
      '       npx tsx bench/train-heldout.ts tokens TEXT.txt OUT.u16 [--shape S]',
  );
  process.exit(64);
}
