// Child process: loads a GGUF vocabulary in llama.cpp (node-llama-cpp, vocab only) and
// answers tokenize/detokenize requests read as JSON from stdin. Runs in its own process
// because a llama.cpp assertion aborts the whole process.
import { getLlama, LlamaLogLevel, type Token } from 'node-llama-cpp';
import type { OracleAnswer, OracleJob } from './llama-oracle.js';

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const jobs = JSON.parse(await readStdin()) as OracleJob[];
const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const answers: OracleAnswer[] = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.modelPath, vocabOnly: true });
  const eog: number[] = [];
  for (const id of model.iterateAllTokens()) if (model.isEogToken(id)) eog.push(id);
  answers.push({
    tokenized: job.tokenize.map((t) => Array.from(model.tokenize(t.text, t.special), Number)),
    detokenized: job.detokenize.map((d) => model.detokenize(d.ids as Token[], d.special)),
    bos: model.tokens.bos,
    eos: model.tokens.eos,
    eog,
  });
  await model.dispose();
}
process.stdout.write(JSON.stringify(answers));
await llama.dispose();
