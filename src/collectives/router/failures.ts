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

/** A post or completion failed on the link to `peer` (`status`: the completion's). */
export function linkFailedError(
  rank: number,
  peer: number,
  status: string | undefined,
  cause: unknown,
): TandemError {
  return new TandemError(
    'COLL_PEER_LOST',
    `rank ${rank} lost its link to rank ${peer} (${status ?? 'post failed'})`,
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
 * (or NO_RANK), the payload JSON `{ code, message, rank }`, cut to NOTICE_CHARS characters.
 */
export function abortNotice(error: TandemError): { lost: number; body: Uint8Array } {
  const lost =
    error.code === 'COLL_PEER_LOST' && typeof error.details.rank === 'number' ? error.details.rank : NO_RANK;
  const body = new TextEncoder().encode(
    JSON.stringify({ code: error.code, message: error.message, rank: lost }).slice(0, NOTICE_CHARS),
  );
  return { lost, body };
}

/**
 * The error an abort notice (header `h`, `payload`, arriving over the link from `from`)
 * stands for on this rank: its code if it is one a peer may report, else COLL_ABORTED.
 */
export function readAbortNotice(h: Header, payload: Uint8Array, from: number): TandemError {
  let info: { code?: string; message?: string; rank?: number } = {};
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
  const text =
    code === 'COLL_PEER_LOST' && lost !== undefined
      ? `rank ${lost} was lost (reported by rank ${h.src} via rank ${from}): ${info.message ?? ''}`
      : `rank ${h.src} aborted the communicator: ${info.message ?? 'no reason given'}`;
  return new TandemError(code, text, {
    hint:
      code === 'COLL_MISMATCH'
        ? 'make every rank call the same collectives in the same order with the same count, dtype and op'
        : 'the communicator is aborted on every rank; create a new one',
    details: { rank: lost ?? h.src, reportedBy: h.src },
  });
}
