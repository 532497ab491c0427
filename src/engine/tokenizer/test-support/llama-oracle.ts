// Runs llama.cpp's tokenizer (through node-llama-cpp) on a GGUF file in a child process.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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
// Resolved here so the child finds tsx whatever the working directory.
const tsxLoader = import.meta.resolve('tsx');

/** Tokenizes and detokenizes with llama.cpp, one answer per job; rejects if the child fails or takes over `timeoutMs`. */
export function askLlamaCpp(jobs: OracleJob[], timeoutMs = 60_000): Promise<OracleAnswer[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', tsxLoader, childPath], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`llama.cpp oracle timed out after ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`llama.cpp oracle exited with ${code ?? signal}; stderr: ${stderr.slice(-2000)}`));
        return;
      }
      try {
        resolve(JSON.parse(stdout) as OracleAnswer[]);
      } catch (e) {
        reject(new Error(`llama.cpp oracle printed no JSON: ${stdout.slice(0, 500)}`, { cause: e }));
      }
    });
    child.stdin.end(JSON.stringify(jobs));
  });
}
