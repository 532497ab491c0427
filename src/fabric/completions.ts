import { TandemError } from '../errors/index.js';
import type { WorkCompletion } from './types.js';

/**
 * Why a queue pair failed, beside the failed completions it pushed (the request that failed,
 * everything it flushed, everything posted after): WorkCompletion keeps the verbs shape, and
 * completionError() puts the reason in the message and details. Held weakly: an entry goes
 * with its completion.
 */
const failureReasons = new WeakMap<WorkCompletion, string>();

/** Records why `wc` failed (the queue pair's error reason). */
export function noteFailure(wc: WorkCompletion, reason: string): void {
  failureReasons.set(wc, reason);
}

/** Why `wc` failed, when its queue pair said (undefined for completions it did not note). */
export function failureReason(wc: WorkCompletion): string | undefined {
  return failureReasons.get(wc);
}

/** The typed error a failed completion stands for (remote category unless it was local). */
export function completionError(wc: WorkCompletion): TandemError {
  const local = wc.status === 'local_protection' || wc.status === 'local_length';
  const reason = failureReasons.get(wc);
  return new TandemError(
    local ? 'FABRIC_INVALID_REQUEST' : wc.status === 'timeout' ? 'FABRIC_WAIT_TIMEOUT' : 'FABRIC_WORK_FAILED',
    `${wc.opcode} work request ${wc.wrId} on queue pair ${wc.qpNum} completed with ${wc.status}` +
      (reason === undefined ? '' : ` (${reason})`),
    {
      hint:
        wc.status === 'peer_lost' || wc.status === 'flushed'
          ? 'the connection is gone: reconnect to the peer (is its process alive?)'
          : local
            ? 'check the local SGEs: live lkey of this PD, in range, LOCAL_WRITE for receive and read targets'
            : "check the remote key, address range and the region's access flags on the peer",
      details: reason === undefined ? { ...wc } : { ...wc, reason },
    },
  );
}

/** Throws the typed error of the first failed completion; returns the list otherwise. */
export function expectSuccess(wcs: readonly WorkCompletion[]): readonly WorkCompletion[] {
  for (const wc of wcs) if (wc.status !== 'success') throw completionError(wc);
  return wcs;
}
