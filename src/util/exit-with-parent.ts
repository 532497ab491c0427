import type { SpawnOptions } from 'node:child_process';

/** Set by a parent on a child it wants gone when it goes (see exitWithParent). */
const ENV = 'TANDEM_EXIT_WITH_PARENT';

/**
 * Spawn options for a child that must not outlive this process, however it ends (a SIGKILL
 * runs no cleanup): the child's stdin is a pipe this process holds open and never writes,
 * which the kernel closes when this process exits, and the child, calling exitWithParent(),
 * stops on that end of input. `stdout` and `stderr` are as given.
 */
export function tiedToParent(
  stdout: 'pipe' | 'ignore' | 'inherit',
  stderr: 'pipe' | 'ignore' | 'inherit',
  env: NodeJS.ProcessEnv = process.env,
): SpawnOptions {
  return { stdio: ['pipe', stdout, stderr], env: { ...env, [ENV]: '1' } };
}

/**
 * In a child spawned with tiedToParent(): once stdin ends (the parent exited or closed it), send
 * this process SIGTERM, so that its own shutdown runs (a server stops its nodes; a process
 * without a handler ends). A no-op elsewhere, since a user's stdin may be closed from the
 * start. The marker is removed from the environment, so this process's own children do not
 * take their stdin (often /dev/null) for a parent's exit.
 */
export function exitWithParent(): void {
  if (process.env[ENV] !== '1') return;
  delete process.env[ENV];
  const stdin = process.stdin;
  const stop = (): void => void process.kill(process.pid, 'SIGTERM');
  stdin.once('end', stop);
  stdin.once('error', stop);
  stdin.resume();
  // watching the pipe must not keep an otherwise finished process alive
  (stdin as unknown as { unref?: () => void }).unref?.();
}
