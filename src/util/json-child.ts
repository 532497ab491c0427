// Runs a TypeScript script in a child process (node --import tsx) with a JSON request on
// stdin and parses the JSON it prints on stdout: the llama.cpp oracles of the tests, the
// benchmarks' engine runs and bench plan's concurrent stream probes (calibrate-together.ts).
// A llama.cpp assertion aborts the whole process, so llama.cpp always runs in a child.
import { spawn } from 'node:child_process';

// Resolved here so the child finds tsx whatever the working directory.
const tsxLoader = import.meta.resolve('tsx');

/** Why a child failed: it ran out of time, exited badly, or printed no JSON. */
export class JsonChildError extends Error {
  constructor(
    message: string,
    readonly reason: 'timeout' | 'exit' | 'no-json',
    /** The tail of the child's stderr. */
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'JsonChildError';
  }
}

export interface JsonChildOptions {
  /** Kill the child and reject after this long (default 90 s). */
  timeoutMs?: number;
  /** Names the child in error messages (default: the script's path). */
  what?: string;
}

/**
 * Spawns `script`, writes `request` as JSON to its stdin and resolves with the JSON value of
 * its stdout (the last line that parses, so stray log lines before it are ignored). Rejects
 * with a JsonChildError (the reason and the tail of stderr) when the child fails, prints no
 * JSON or times out.
 */
export function runJsonChild<T>(
  script: string,
  request: unknown,
  options: JsonChildOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 90_000;
  const what = options.what ?? script;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', tsxLoader, script], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      const tail = stderr.slice(-2000);
      reject(new JsonChildError(`${what} timed out after ${timeoutMs} ms; stderr: ${tail}`, 'timeout', tail));
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
        const tail = stderr.slice(-2000);
        reject(new JsonChildError(`${what} exited with ${code ?? signal}; stderr: ${tail}`, 'exit', tail));
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
      reject(
        new JsonChildError(
          `${what} printed no JSON: ${stdout.slice(0, 500)}`,
          'no-json',
          stderr.slice(-2000),
        ),
      );
    });
    child.stdin.end(JSON.stringify(request));
  });
}
