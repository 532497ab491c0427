/**
 * Ends the process with `code` once a command returned. A handle the command leaked (a
 * socket, a timer) must not keep the process alive; the unref'd timer fires only if something
 * still holds the event loop, and waits for stdout and stderr to drain first so piped output
 * is never cut short.
 */
export function exitWhenDone(code: number, graceMs = 500): void {
  process.exitCode = code;
  const exitWhenFlushed = (): void => {
    if (process.stdout.writableLength + process.stderr.writableLength > 0)
      setTimeout(exitWhenFlushed, 50).unref();
    else process.exit(code);
  };
  setTimeout(exitWhenFlushed, graceMs).unref();
}
