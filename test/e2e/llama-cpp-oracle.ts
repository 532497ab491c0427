// Runs models in llama.cpp (node-llama-cpp) in a child process and returns their logits.
import { fileURLToPath } from 'node:url';
import { runJsonChild } from '../../src/util/json-child.js';

export interface OracleJob {
  modelPath: string;
  prompt: number[];
  /** Greedy steps: logits are returned for each, and llama.cpp's greedy sampler runs as many. */
  steps: number;
  vocabSize: number;
  contextSize: number;
  threads?: number;
}

/** As sent by the child: logits base64 f32 [steps, vocab]. */
export interface OracleResult {
  logits: string;
  greedy: number[];
}

export interface OracleAnswer {
  /** Logits of each greedy step, [vocab] each. */
  steps: Float32Array[];
  /** Tokens from llama.cpp's own greedy sampler. */
  greedy: number[];
}

const childPath = fileURLToPath(new URL('./llama-cpp-oracle-child.ts', import.meta.url));

/** Asks llama.cpp; rejects if the child fails or takes more than `timeoutMs`. */
export async function runLlamaCpp(jobs: OracleJob[], timeoutMs = 90_000): Promise<OracleAnswer[]> {
  const results = await runJsonChild<OracleResult[]>(childPath, jobs, { timeoutMs, what: 'llama.cpp child' });
  return results.map((r, i) => {
    const all = new Float32Array(new Uint8Array(Buffer.from(r.logits, 'base64')).buffer);
    const vocab = jobs[i]!.vocabSize;
    const steps = Array.from({ length: all.length / vocab }, (_, s) => all.slice(s * vocab, (s + 1) * vocab));
    return { steps, greedy: r.greedy };
  });
}
