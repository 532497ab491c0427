// Runs a TypeScript script in a child process (node --import tsx) with a JSON request on
// stdin and parses the JSON it prints on stdout. The llama.cpp oracles of the tests use it:
// a llama.cpp assertion aborts the whole process, so llama.cpp always runs in a child.
import { spawn } from 'node:child_process';

// Resolved here so the child finds tsx whatever the working directory.
const tsxLoader = import.meta.resolve('tsx');

export interface JsonChildOptions {
  /** Kill the child and reject after this long (default 90 s). */
  timeoutMs?: number;
  /** Names the child in error messages (default: the script's path). */
  what?: string;
}

/**
 * Spawns `script`, writes `request` as JSON to its stdin and resolves with the JSON value of
 * its stdout (the last line that parses, so stray log lines before it are ignored). Rejects
 * with the tail of stderr when the child fails, prints no JSON or times out.
 */
export function runJsonChild<T>(script: string, request: unknown, options: JsonChildOptions = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 90_000;
  const what = options.what ?? script;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', tsxLoader, script], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} timed out after ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}`));
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
        reject(new Error(`${what} exited with ${code ?? signal}; stderr: ${stderr.slice(-2000)}`));
        return;
      }
      const text = stdout.trim();
      const lines = text.split('\n');
      for (const candidate of [text, lines[lines.length - 1] ?? '']) {
        try {
          resolve(JSON.parse(candidate) as T);
          return;
        } catch {
          // try the last line alone
        }
      }
      reject(new Error(`${what} printed no JSON: ${stdout.slice(0, 500)}`));
    });
    child.stdin.end(JSON.stringify(request));
  });
}
