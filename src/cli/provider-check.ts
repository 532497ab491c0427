import { TandemError } from '../errors/index.js';

/**
 * Before a command starts processes on this host over `provider`: rdma needs a verbs device
 * here, so a missing library or device is one typed error naming the command and the reason,
 * up front, instead of an error from each process once it is running. Other providers need
 * nothing checked. The rdma module (and its FFI) is loaded only when rdma is asked for.
 */
export async function checkLocalProvider(command: string, provider: string | undefined): Promise<void> {
  if (provider !== 'rdma') return;
  const problem = (await import('../fabric/rdma-context.js')).rdmaUnavailable();
  if (problem === undefined) return;
  throw new TandemError(problem.code, `${command}: --provider rdma: ${problem.message}`, {
    hint: problem.hint,
    cause: problem,
  });
}
