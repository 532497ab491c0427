// Runs models in llama.cpp (node-llama-cpp) in a child process and returns their logits.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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
export function runLlamaCpp(jobs: OracleJob[], timeoutMs = 90_000): Promise<OracleAnswer[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', childPath], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`llama.cpp timed out after ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}`));
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
        reject(new Error(`llama.cpp child exited with ${code ?? signal}; stderr: ${stderr.slice(-2000)}`));
        return;
      }
      try {
        const results = JSON.parse(stdout) as OracleResult[];
        resolve(
          results.map((r, i) => {
            const all = new Float32Array(new Uint8Array(Buffer.from(r.logits, 'base64')).buffer);
            const vocab = jobs[i]!.vocabSize;
            const steps = Array.from({ length: all.length / vocab }, (_, s) => all.slice(s * vocab, (s + 1) * vocab));
            return { steps, greedy: r.greedy };
          }),
        );
      } catch (e) {
        reject(new Error(`llama.cpp child printed no JSON: ${stdout.slice(0, 500)}`, { cause: e }));
      }
    });
    child.stdin.end(JSON.stringify(jobs));
  });
}
