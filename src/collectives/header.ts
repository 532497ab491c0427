import { TandemError } from '../errors/index.js';

/**
 * The 48-byte header in front of every fragment on a link. Receivers check the collective
 * fields (op, dtype, reduce op, algorithm, count, sequence, aux) against their own call, so
 * ranks that called different things fail with COLL_MISMATCH instead of hanging.
 *
 * offset  field
 *  0 u32  magic 'TNDC'
 *  4 u8   kind (data, credit, abort, bye, hello)
 *  5 u8   op          6 u8 dtype      7 u8 reduce | 0x10 q8
 *  8 u8   algorithm   9 u8 lane (concurrent streams between one pair, e.g. both ring directions)
 * 10 u16  step
 * 12 u32  communicator id
 * 16 u32  sequence number of the call on that communicator (or of the pair, for send/recv)
 * 20 u32  count of the call (elements)
 * 24 u16  source world rank     26 u16 destination world rank (relays forward on dst)
 * 28 u32  message payload bytes (all fragments)
 * 32 u32  this fragment's byte offset in the payload
 * 36 u32  credits returned to the receiver of this fragment (link level, piggybacked)
 * 40 u32  aux: root, tag, or per-call extra     44 u8 channel (0 collective, 1 send/recv)
 */
export const headerBytes = 48;
const MAGIC = 0x43444e54;

export const MessageKind = { data: 1, credit: 2, abort: 3, bye: 4, hello: 5 } as const;
export type MessageKindCode = (typeof MessageKind)[keyof typeof MessageKind];

export const OpCode = {
  'all-reduce': 1,
  'all-gather': 2,
  'reduce-scatter': 3,
  broadcast: 4,
  'all-to-all': 5,
  'send-recv': 6,
  barrier: 7,
  split: 8,
  rendezvous: 9,
} as const;
export type CollectiveOp = keyof typeof OpCode;

export const ReduceCode = { none: 0, sum: 1, max: 2, min: 3, mean: 4 } as const;
export const AlgorithmCode = { none: 0, mesh: 1, ring: 2, rhd: 3, tree: 4 } as const;

export interface Header {
  kind: number;
  op: number;
  dtype: number;
  reduce: number;
  algorithm: number;
  lane: number;
  step: number;
  commId: number;
  seq: number;
  count: number;
  src: number;
  dst: number;
  totalBytes: number;
  fragOffset: number;
  credits: number;
  aux: number;
  channel: number;
}

export function writeHeader(view: DataView, at: number, h: Header): void {
  view.setUint32(at, MAGIC, true);
  view.setUint8(at + 4, h.kind);
  view.setUint8(at + 5, h.op);
  view.setUint8(at + 6, h.dtype);
  view.setUint8(at + 7, h.reduce);
  view.setUint8(at + 8, h.algorithm);
  view.setUint8(at + 9, h.lane);
  view.setUint16(at + 10, h.step, true);
  view.setUint32(at + 12, h.commId, true);
  view.setUint32(at + 16, h.seq >>> 0, true);
  view.setUint32(at + 20, h.count >>> 0, true);
  view.setUint16(at + 24, h.src, true);
  view.setUint16(at + 26, h.dst, true);
  view.setUint32(at + 28, h.totalBytes, true);
  view.setUint32(at + 32, h.fragOffset, true);
  view.setUint32(at + 36, h.credits, true);
  view.setUint32(at + 40, h.aux >>> 0, true);
  view.setUint8(at + 44, h.channel);
}

/** Parses a header from `length` received bytes; throws COLL_BAD_MESSAGE on garbage. */
export function readHeader(view: DataView, at: number, length: number, from: number): Header {
  if (length < headerBytes || view.getUint32(at, true) !== MAGIC) {
    throw new TandemError(
      'COLL_BAD_MESSAGE',
      `rank ${from} sent a ${length}-byte fragment without a valid collectives header`,
      {
        hint: 'every rank must run the same tandem version; check that nothing else uses these connections',
        details: { from, length },
      },
    );
  }
  const h: Header = {
    kind: view.getUint8(at + 4),
    op: view.getUint8(at + 5),
    dtype: view.getUint8(at + 6),
    reduce: view.getUint8(at + 7),
    algorithm: view.getUint8(at + 8),
    lane: view.getUint8(at + 9),
    step: view.getUint16(at + 10, true),
    commId: view.getUint32(at + 12, true),
    seq: view.getUint32(at + 16, true),
    count: view.getUint32(at + 20, true),
    src: view.getUint16(at + 24, true),
    dst: view.getUint16(at + 26, true),
    totalBytes: view.getUint32(at + 28, true),
    fragOffset: view.getUint32(at + 32, true),
    credits: view.getUint32(at + 36, true),
    aux: view.getUint32(at + 40, true),
    channel: view.getUint8(at + 44),
  };
  if (h.fragOffset > h.totalBytes || h.fragOffset + (length - headerBytes) > h.totalBytes) {
    throw new TandemError(
      'COLL_BAD_MESSAGE',
      `rank ${from} sent a fragment at ${h.fragOffset}+${length - headerBytes} past its message length ${h.totalBytes}`,
      {
        hint: 'every rank must run the same tandem version',
        details: { from },
      },
    );
  }
  return h;
}

function name<T extends Record<string, number>>(table: T, code: number): string {
  return Object.entries(table).find(([, v]) => v === code)?.[0] ?? `#${code}`;
}

/** A readable description of a call from its header, for mismatch messages. */
export function describeCall(
  h: Pick<Header, 'op' | 'dtype' | 'reduce' | 'algorithm' | 'count' | 'seq' | 'aux'>,
): string {
  const dtypes = ['?', 'f32', 'f16', 'bf16', 'i32'];
  const q8 = h.reduce & 0x10 ? ' q8' : '';
  return `${name(OpCode, h.op)}(count=${h.count}, dtype=${dtypes[h.dtype] ?? h.dtype}, op=${name(ReduceCode, h.reduce & 0xf)}${q8}, algorithm=${name(AlgorithmCode, h.algorithm)}, aux=${h.aux}) #${h.seq}`;
}
