import type { ChildProcess } from 'node:child_process';

/**
 * Resolves once `child` prints `text` on its stdout (a pipe); rejects, naming `what` it was
 * waiting for, when `timeoutMs` pass first or the child exits first. For tests that drive a
 * child to a known point before acting on it.
 */
export function untilOutput(
  child: ChildProcess,
  text: string,
  timeoutMs: number,
  what: string,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the child did not ${what} within ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
    child.stdout?.on('data', (d: Buffer) => {
      if (d.toString().includes(text)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.on('exit', () => {
      clearTimeout(timer);
      reject(new Error(`the child exited before it could ${what}`));
    });
  });
}
