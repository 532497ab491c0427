/**
 * The shipped model's greedy check, from the training side: loads a `tandem train` checkpoint
 * and continues PROMPT greedily for 24 tokens with the trainer's own forward pass (LlamaGrad
 * on the reference GEMM, f32, the whole sequence again at each step: no KV cache, none of
 * the inference engine's kernels), tokenized by the vocabulary the written GGUF carries.
 * Prints `{"prompt","greedy","text"}`: models/tandem-tiny.json's `check`, which
 * src/cli/embedded-model.test.ts holds the shipped Q8_0 file to through the inference engine.
 *
 *   npx tsx bench/trained/train-greedy.ts CKPT "PROMPT"
 */
import { referenceGemm } from '../../src/kernels/backward/gemm.js';
import { loadCheckpoint } from '../../src/engine/train/checkpoint.js';
import { LlamaGrad, paramLayout, trainingTokenizer } from '../../src/engine/train/index.js';

const GREEDY_TOKENS = 24;

async function main(): Promise<void> {
  const [ckpt, text] = process.argv.slice(2);
  if (!ckpt || text === undefined) {
    console.error('usage: npx tsx bench/trained/train-greedy.ts CKPT "PROMPT"');
    process.exit(2);
  }
  const c = await loadCheckpoint(ckpt);
  const layout = paramLayout(c.settings.shape);
  const tokenizer = trainingTokenizer(layout);
  const model = new LlamaGrad(layout, c.weights, referenceGemm);
  const prompt = tokenizer.encode(text);
  const ids = [...prompt];
  const vocab = layout.shape.vocab;
  for (let i = 0; i < GREEDY_TOKENS; i++) {
    const seq = ids.length;
    // one row of seq inputs and a target slot the forward does not read
    const acts = model.forward([...ids, 0], 1, seq);
    const last = acts.logits.subarray((seq - 1) * vocab, seq * vocab);
    let best = 0;
    for (let v = 1; v < vocab; v++) if ((last[v] as number) > (last[best] as number)) best = v;
    ids.push(best);
  }
  const greedy = ids.slice(prompt.length);
  console.log(JSON.stringify({ prompt, greedy, text: tokenizer.decode(greedy) }));
}

await main();
