// Runs llama.cpp's tokenizer (through node-llama-cpp) on a GGUF file in a child process.
import { fileURLToPath } from 'node:url';
import { runJsonChild } from '../../../util/json-child.js';

/** One vocabulary file and what to ask llama.cpp about it. */
export interface OracleJob {
  modelPath: string;
  tokenize: { text: string; special: boolean }[];
  detokenize: { ids: number[]; special: boolean }[];
}

export interface OracleAnswer {
  tokenized: number[][];
  detokenized: string[];
  bos: number | null;
  eos: number | null;
  /** Every id llama.cpp counts as end of generation. */
  eog: number[];
}

const childPath = fileURLToPath(new URL('./llama-oracle-child.ts', import.meta.url));

/** Tokenizes and detokenizes with llama.cpp, one answer per job; rejects if the child fails or takes over `timeoutMs`. */
export function askLlamaCpp(jobs: OracleJob[], timeoutMs = 60_000): Promise<OracleAnswer[]> {
  return runJsonChild<OracleAnswer[]>(childPath, jobs, { timeoutMs, what: 'llama.cpp oracle' });
}
