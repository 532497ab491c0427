// The one SIGINT/SIGTERM pattern of tandem: undo what is half done (a temporary file, child
// processes of our own), then let the signal end the process as it would have.

/** The signals that interrupt a command (Ctrl-C, `kill`). */
export const interruptSignals = ['SIGINT', 'SIGTERM'] as const;

/**
 * Runs `cleanup` if SIGINT or SIGTERM arrives while registered, then unregisters and lets the
 * signal take its default course (the process ends with 130 or 143) unless another listener
 * handles it: only the last listener to run re-raises it, so several cleanups all run first.
 * Returns the function that unregisters (it may be called any number of times).
 */
export function onInterrupt(cleanup: (signal: NodeJS.Signals) => void): () => void {
  const listener = (signal: NodeJS.Signals): void => {
    cleanup(signal);
    unregister();
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  };
  const unregister = (): void => {
    for (const s of interruptSignals) process.removeListener(s, listener);
  };
  for (const s of interruptSignals) process.on(s, listener);
  return unregister;
}
