import { spawn as spawnChild } from 'node:child_process';
import { spawn, type IPty } from '@lydell/node-pty';
import { tandemBin } from '../testing.js';

/** ANSI control sequences (cursor moves, erasing, colours) as readline and the dim line write them. */
const ANSI = new RegExp(String.raw`\u001b\[[0-9;?]*[A-Za-z]`, 'g');

/**
 * Tests: `tandem ARGS` in a pseudo-terminal, as a user at a terminal runs it (stdin and stdout
 * are a TTY, so readline edits lines and reads Ctrl-C and Ctrl-D as keys). What it prints is
 * read as plain text (ANSI sequences removed, CR LF and CR CR LF as LF); `next` waits for the next match
 * after the previous one, each wait bounded.
 */
export class TerminalSession {
  private readonly pty: IPty;
  private raw = '';
  private cursor = 0;
  private readonly exited: Promise<number>;

  constructor(args: readonly string[], env: NodeJS.ProcessEnv = process.env) {
    this.pty = spawn(process.execPath, [tandemBin, ...args], {
      name: 'xterm',
      cols: 400,
      rows: 50,
      env: env as Record<string, string>,
    });
    this.pty.onData((d) => (this.raw += d));
    this.exited = new Promise((resolve) => this.pty.onExit((e) => resolve(e.exitCode)));
  }

  /** Everything printed so far, as plain text. */
  get text(): string {
    return this.raw.replace(ANSI, '').replace(/\r+\n/g, '\n');
  }

  /** Waits for `pattern` after the last match; returns the match and the text between. */
  async next(pattern: RegExp | string, timeoutMs = 30_000): Promise<{ match: string; before: string }> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const rest = this.text.slice(this.cursor);
      const at = typeof pattern === 'string' ? rest.indexOf(pattern) : rest.search(pattern);
      if (at >= 0) {
        const match = typeof pattern === 'string' ? pattern : (rest.slice(at).match(pattern)?.[0] as string);
        this.cursor += at + match.length;
        return { match, before: rest.slice(0, at) };
      }
      if (Date.now() > end)
        throw new Error(`no ${String(pattern)} within ${timeoutMs} ms; after the last match:\n${rest}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Types a line (Enter is CR at a terminal). */
  line(text: string): void {
    this.pty.write(`${text}\r`);
  }

  /** Sends keys as typed: '\x03' is Ctrl-C, '\x04' Ctrl-D. */
  keys(text: string): void {
    this.pty.write(text);
  }

  /** The exit code, once the process ends; rejects after `timeoutMs`. */
  exit(timeoutMs = 30_000): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`tandem did not exit within ${timeoutMs} ms:\n${this.text}`)),
        timeoutMs,
      );
    });
    return Promise.race([this.exited, late]).finally(() => clearTimeout(timer));
  }

  /** Ends the process if it still runs (a test that failed halfway). */
  kill(): void {
    try {
      this.pty.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

/**
 * `tandem chat ARGS` with `lines` piped to its stdin (not a terminal: no prompt, no colour),
 * run asynchronously so that a server in this process can answer it; bounded by `timeoutMs`.
 */
export function chatPiped(
  args: readonly string[],
  lines: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(process.execPath, [tandemBin, 'chat', ...args], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tandem chat did not exit within ${timeoutMs} ms:\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(lines.map((l) => `${l}\n`).join(''));
  });
}
