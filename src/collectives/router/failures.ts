import { TandemError } from '../../errors/index.js';
import type { Header } from '../header.js';

/** The lost rank of an abort notice that names none. */
export const NO_RANK = 0xffff;
/** Characters of an abort notice's JSON at most. */
const NOTICE_CHARS = 4000;

/** A send or put towards a link that is gone (`left`: the peer said goodbye). */
export function lostLinkError(rank: number, peer: number, left: boolean): TandemError {
  const why = left ? `rank ${peer} closed its communicator` : `the link to rank ${peer} is closed`;
  return new TandemError('COLL_PEER_LOST', `rank ${rank}: ${why}`, {
    hint: 'a rank closed (or died) while others still needed it; make the same calls on every rank before close()',
    details: { rank: peer, reportedBy: rank, ...(left ? { left: true } : {}) },
  });
}

/**
 * A post or completion failed on the link to `peer` (`status`: the completion's; `reason`:
 * why, where the fabric said: the peer closed the connection, a malformed frame, an errno).
 */
export function linkFailedError(
  rank: number,
  peer: number,
  status: string | undefined,
  cause: unknown,
  reason?: string,
): TandemError {
  return new TandemError(
    'COLL_PEER_LOST',
    `rank ${rank} lost its link to rank ${peer} (${status ?? 'post failed'}${reason ? `: ${reason}` : ''})`,
    {
      hint: `rank ${peer} died or its connection broke; the communicator is aborted: create a new one with the surviving ranks`,
      details: { rank: peer, reportedBy: rank, status },
      cause,
    },
  );
}

/** What every later call gets once the router is closed. */
export function closedError(rank: number): TandemError {
  return new TandemError('COLL_ABORTED', `rank ${rank}: the communicator is closed`, {
    hint: 'create a new communicator',
  });
}

/** A peer wrote a receive slot out of order (message k must land in slot k % slots). */
export function slotOrderError(peer: number, wrote: number | undefined, next: number): TandemError {
  return new TandemError(
    'COLL_BAD_MESSAGE',
    `rank ${peer} wrote receive slot ${String(wrote)} where slot ${next} was next`,
    {
      hint: 'every rank must run the same tandem version',
      details: { from: peer },
    },
  );
}

/**
 * The abort notice that floods `error` to every rank: the header's aux carries the lost rank
 * (or NO_RANK), the payload JSON `{ code, message, rank, by }`, `by` the rank that saw the loss
 * first-hand (kept as the notice is passed on, so that the pair a loss names is the link that
 * broke, never the relaying rank's link to the lost one). The message is cut so that the JSON
 * stays within NOTICE_CHARS characters.
 */
export function abortNotice(error: TandemError): { lost: number; body: Uint8Array } {
  const lost =
    error.code === 'COLL_PEER_LOST' && typeof error.details.rank === 'number' ? error.details.rank : NO_RANK;
  const by = typeof error.details.reportedBy === 'number' ? error.details.reportedBy : undefined;
  let message = error.message;
  let json = JSON.stringify({ code: error.code, message, rank: lost, by });
  while (json.length > NOTICE_CHARS) {
    message = message.slice(0, message.length >> 1);
    json = JSON.stringify({ code: error.code, message, rank: lost, by });
  }
  return { lost, body: new TextEncoder().encode(json) };
}

/**
 * The error an abort notice (header `h`, `payload`, arriving over the link from `from`)
 * stands for on this rank: its code if it is one a peer may report, else COLL_ABORTED.
 */
export function readAbortNotice(h: Header, payload: Uint8Array, from: number): TandemError {
  let info: { code?: string; message?: string; rank?: number; by?: unknown } = {};
  try {
    info = JSON.parse(new TextDecoder().decode(payload)) as typeof info;
  } catch {
    info = {};
  }
  const code =
    info.code === 'COLL_PEER_LOST' || info.code === 'COLL_MISMATCH' || info.code === 'COLL_TIMEOUT'
      ? info.code
      : 'COLL_ABORTED';
  const lost = h.aux === NO_RANK ? undefined : h.aux;
  // a notice passed on keeps its first-hand reporter; one from an older sender names its sender
  const by = typeof info.by === 'number' && Number.isInteger(info.by) ? info.by : h.src;
  const aborted = `rank ${h.src} aborted the communicator: `;
  const said = info.message ?? 'no reason given';
  const text =
    code === 'COLL_PEER_LOST' && lost !== undefined
      ? `rank ${lost} was lost (reported by rank ${by} via rank ${from}): ${info.message ?? ''}`
      : said.startsWith(aborted)
        ? said // the aborting rank's own error already says so
        : `${aborted}${said}`;
  return new TandemError(code, text, {
    hint:
      code === 'COLL_MISMATCH'
        ? 'make every rank call the same collectives in the same order with the same count, dtype and op'
        : 'the communicator is aborted on every rank; create a new one',
    details: { rank: lost ?? h.src, reportedBy: lost === undefined ? h.src : by },
  });
}
