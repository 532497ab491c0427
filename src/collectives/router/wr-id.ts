/**
 * The work-request id of everything the router posts: it names the link, the slot and the
 * direction, so a completion is routed without a lookup of its own.
 *
 *   bits 16 and up  link: the link's index in the router's list of links
 *   bits 1..15      slot: a slot of that link's region (receive slots first, then send
 *                   slots); PUT_SLOT, which no slot has, for a put()
 *   bit 0           kind: WrKind.recv for a posted receive, WrKind.send for a send or write
 *
 * Ids stay below 2^31 while a router has fewer than 32,768 links, so the bit operations on
 * them are exact.
 */

export const WrKind = { send: 0, recv: 1 } as const;
export type WrKindCode = (typeof WrKind)[keyof typeof WrKind];

/** The slot number of a put()'s one-sided write (slots are numbered below it). */
export const PUT_SLOT = 0x7fff;

const LINK_UNIT = 0x10000;

export function encodeWrId(link: number, slot: number, kind: WrKindCode): number {
  return link * LINK_UNIT + slot * 2 + kind;
}

export function wrIdLink(wrId: number): number {
  return Math.floor(wrId / LINK_UNIT);
}

export function wrIdSlot(wrId: number): number {
  return (wrId % LINK_UNIT) >> 1;
}

export function wrIdKind(wrId: number): WrKindCode {
  return (wrId & 1) as WrKindCode;
}
