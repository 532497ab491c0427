/**
 * Loads GGUF files in llama.cpp (node-llama-cpp, CPU only) and prints one JSON line per
 * file: whether it loaded, how it tokenizes a text, and the logits after the text.
 * Run it in a child process: llama.cpp asserts on bad files by killing the process.
 *
 *   node --import tsx llama-cpp-probe.ts '{"files":["a.gguf"],"text":"hello"}'
 */
import { getLlama } from 'node-llama-cpp';

interface ProbeRequest {
  files: string[];
  text: string;
}

export interface ProbeResult {
  file: string;
  ok: boolean;
  error?: string;
  tokens?: number[];
  /** The text with special tokens parsed (`<s>`, `<|im_start|>` ...). */
  specialTokens?: number[];
  detokenized?: string;
  vocabSize?: number;
  /** Logits for the next token after BOS + the text's tokens, indexed by token id. */
  logits?: number[];
}

async function main(): Promise<void> {
  const req = JSON.parse(process.argv[2] ?? '{}') as ProbeRequest;
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
  for (const file of req.files) {
    const result: ProbeResult = { file, ok: false };
    try {
      const model = await llama.loadModel({ modelPath: file });
      const tokens = [...model.tokenize(req.text)];
      result.tokens = tokens;
      result.specialTokens = [...model.tokenize(req.text, true)];
      result.detokenized = model.detokenize(model.tokenize(req.text));
      const ctx = await model.createContext({
        contextSize: 256,
        experimentalKvCacheKeyType: 'F32',
        experimentalKvCacheValueType: 'F32',
      });
      const seq = ctx.getSequence();
      const bos = model.tokens.bos;
      const input = bos === null ? tokens : [bos, ...tokens];
      const last = input[input.length - 1] as (typeof input)[number];
      const out = await seq.controlledEvaluate([
        ...input.slice(0, -1),
        [last, { generateNext: { logits: true } }],
      ]);
      const logits = out[out.length - 1]?.next.logits;
      if (logits) {
        const arr = new Array<number>(logits.size).fill(NaN);
        for (const [t, v] of logits) arr[t as number] = v;
        result.logits = arr;
        result.vocabSize = logits.size;
      }
      result.ok = true;
      await ctx.dispose();
      await model.dispose();
    } catch (error) {
      result.error = (error as Error).message;
    }
    process.stdout.write(JSON.stringify(result) + '\n');
  }
  await llama.dispose();
}

await main();
