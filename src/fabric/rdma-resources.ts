import { TandemError } from '../errors/index.js';
import { fail, type RdmaContext } from './rdma-context.js';
import { IBV, WC_STATUS_NAMES } from './rdma-verbs-enums.js';
import type { Verbs } from './rdma-verbs.js';
import { Access, type CompletionOpcode, type Opcode, type Sge, type WcStatus } from './types.js';

/**
 * The verbs objects of one device as thin handles: a protection domain, its memory regions,
 * completion queues (polled; with a completion channel for sleeping waits) and queue pairs
 * (RC or UC) with their INIT -> RTR -> RTS transitions and the encoding of work requests
 * into ibv_send_wr / ibv_recv_wr. A failed verb throws; a failed completion is a status.
 */

/** The fabric's access flags as verbs'. */
export function verbsAccess(access: number): number {
  let out = 0;
  if (access & Access.LOCAL_WRITE) out |= IBV.ACCESS_LOCAL_WRITE;
  // verbs refuses REMOTE_WRITE without LOCAL_WRITE (the NIC writes the memory locally).
  if (access & Access.REMOTE_WRITE) out |= IBV.ACCESS_REMOTE_WRITE | IBV.ACCESS_LOCAL_WRITE;
  if (access & Access.REMOTE_READ) out |= IBV.ACCESS_REMOTE_READ;
  return out;
}

/** A verbs completion status as the fabric's (types.ts WcStatus). */
export function mapWcStatus(status: number): WcStatus {
  const name = WC_STATUS_NAMES[status];
  switch (name) {
    case 'SUCCESS':
      return 'success';
    case 'LOC_LEN_ERR':
      return 'local_length';
    case 'LOC_PROT_ERR':
    case 'LOC_ACCESS_ERR':
      return 'local_protection';
    case 'WR_FLUSH_ERR':
      return 'flushed';
    case 'REM_ACCESS_ERR':
      // verbs does not tell an unknown key from missing rights or a range outside the region.
      return 'remote_access';
    case 'REM_INV_REQ_ERR':
    case 'REM_OP_ERR':
    case 'REM_INV_RD_REQ_ERR':
      return 'remote_invalid';
    case 'RETRY_EXC_ERR':
    case 'RNR_RETRY_EXC_ERR':
    case 'RESP_TIMEOUT_ERR':
    case 'REM_ABORT_ERR':
    case 'FATAL_ERR':
      return 'peer_lost';
    default:
      return 'remote_invalid';
  }
}

const WC_OPCODES: Record<number, CompletionOpcode> = {
  [IBV.WC_SEND]: 'send',
  [IBV.WC_RDMA_WRITE]: 'write',
  [IBV.WC_RDMA_READ]: 'read',
  [IBV.WC_RECV]: 'recv',
  [IBV.WC_RECV_RDMA_WITH_IMM]: 'recv_imm',
};

export const WR_OPCODES: Record<Opcode, number> = {
  send: IBV.WR_SEND,
  write: IBV.WR_RDMA_WRITE,
  write_imm: IBV.WR_RDMA_WRITE_WITH_IMM,
  read: IBV.WR_RDMA_READ,
};

export interface RawCompletion {
  wrId: number;
  /** The bits above wrId in verbs' 64-bit wr_id (WR_TAG_SHIFT): what the poster noted there. */
  tag: number;
  status: WcStatus;
  /** verbs' own status name, for messages. */
  verbsStatus: string;
  /** undefined for a failed completion (verbs leaves the opcode unset there). */
  opcode: CompletionOpcode | undefined;
  byteLen: number;
  imm?: number;
  qpNum: number;
}

/**
 * verbs' wr_id is 64 bits; a fabric wrId is a JS integer below 2^53. The poster keeps its own
 * notes in the 11 bits above it (the rdma provider: opcode and flags), so a failed completion,
 * whose opcode verbs leaves unset, still says what it was.
 */
export const WR_TAG_SHIFT = 21;
const WR_ID_HIGH_MASK = (1 << WR_TAG_SHIFT) - 1;

/** The two u32 halves of a wr_id carrying `wrId` and `tag`. */
export function wrIdHalves(wrId: number, tag: number): [lo: number, hi: number] {
  const hi = Math.floor(wrId / 0x100000000);
  return [wrId >>> 0, ((hi & WR_ID_HIGH_MASK) | (tag << WR_TAG_SHIFT)) >>> 0];
}

export class RdmaPd {
  readonly pd: bigint;
  constructor(readonly context: RdmaContext) {
    this.pd = context.verbs.fn.ibv_alloc_pd(context.ctx);
    if (this.pd === 0n) fail(context.verbs, 'ibv_alloc_pd', 'the device is out of protection domains');
  }
  /** Registers `buffer` (its ArrayBuffer storage does not move) with the fabric's access flags. */
  register(buffer: Uint8Array, access: number): RdmaMr {
    return new RdmaMr(this, buffer, access);
  }
  close(): void {
    this.context.verbs.fn.ibv_dealloc_pd(this.pd);
  }
}

export class RdmaMr {
  readonly mr: bigint;
  readonly addr: bigint;
  readonly lkey: number;
  readonly rkey: number;
  constructor(
    readonly pd: RdmaPd,
    readonly buffer: Uint8Array,
    readonly access: number,
  ) {
    const v = pd.context.verbs;
    this.addr = v.addressOf(buffer);
    this.mr = v.fn.ibv_reg_mr(pd.pd, this.addr, buffer.byteLength, verbsAccess(access));
    if (this.mr === 0n) {
      fail(
        v,
        `ibv_reg_mr of ${buffer.byteLength} bytes`,
        'the device caps registrations: use a registration pool',
      );
    }
    this.lkey = v.readU32(this.mr, v.layout.offset('ibv_mr', 'lkey'));
    this.rkey = v.readU32(this.mr, v.layout.offset('ibv_mr', 'rkey'));
  }
  sge(offset = 0, length = this.buffer.byteLength - offset): Sge {
    return { addr: this.addr + BigInt(offset), length, lkey: this.lkey };
  }
  deregister(): void {
    this.pd.context.verbs.fn.ibv_dereg_mr(this.mr);
  }
}

/** What RdmaCq.poll returns when the queue is empty (no array per empty poll); never written. */
const NO_COMPLETIONS: readonly RawCompletion[] = [];

interface WcOffsets {
  status: number;
  opcode: number;
  wcFlags: number;
  byteLen: number;
  qpNum: number;
  immData: number;
}

function wcOffsets(layout: Verbs['layout']): WcOffsets {
  const at = (field: string): number => layout.offset('ibv_wc', field);
  return {
    status: at('status'),
    opcode: at('opcode'),
    wcFlags: at('wc_flags'),
    byteLen: at('byte_len'),
    qpNum: at('qp_num'),
    immData: at('imm_data'),
  };
}

export class RdmaCq {
  readonly cq: bigint;
  readonly channel: bigint;
  /** The completion channel's descriptor: readable once an armed CQ has a completion. */
  readonly fd: number;
  /** Whether a notification was requested and not yet consumed (ibv_req_notify_cq is one-shot). */
  armed = false;
  private readonly wcs: Uint8Array;
  private readonly view: DataView;
  private readonly wcSize: number;
  /** ibv_wc's field offsets, taken once: koffi.offsetof looks a field up by name on each call. */
  private readonly at: WcOffsets;
  constructor(
    readonly context: RdmaContext,
    depth: number,
    readonly batch = 32,
  ) {
    const v = context.verbs;
    this.channel = v.fn.ibv_create_comp_channel(context.ctx);
    if (this.channel === 0n) fail(v, 'ibv_create_comp_channel', 'the device is out of event channels');
    this.cq = v.fn.ibv_create_cq(context.ctx, Math.min(depth, context.attr.maxCqe), 0n, this.channel, 0);
    if (this.cq === 0n) fail(v, `ibv_create_cq(${depth})`, 'lower the completion queue depth');
    this.fd = v.readU32(this.channel, v.layout.offset('ibv_comp_channel', 'fd'));
    this.wcSize = v.layout.size('ibv_wc');
    this.at = wcOffsets(v.layout);
    this.wcs = new Uint8Array(this.wcSize * batch);
    this.view = new DataView(this.wcs.buffer);
  }

  /** Up to `max` completions now (ibv_poll_cq through the ops table); NO_COMPLETIONS when none. */
  poll(max = this.batch): readonly RawCompletion[] {
    const n = this.context.ops.pollCq(this.cq, Math.min(max, this.batch), this.wcs);
    if (n === 0) return NO_COMPLETIONS;
    if (n < 0) fail(this.context.verbs, 'ibv_poll_cq', 'the completion queue overran or the device failed');
    const out: RawCompletion[] = [];
    const v = this.view;
    const at = this.at;
    for (let i = 0; i < n; i++) {
      const o = i * this.wcSize;
      const status = v.getInt32(o + at.status, true);
      const opcode = v.getInt32(o + at.opcode, true);
      const flags = v.getUint32(o + at.wcFlags, true);
      const lo = v.getUint32(o, true);
      const hi = v.getUint32(o + 4, true);
      const wc: RawCompletion = {
        wrId: (hi & WR_ID_HIGH_MASK) * 0x100000000 + lo,
        tag: hi >>> WR_TAG_SHIFT,
        status: mapWcStatus(status),
        verbsStatus: WC_STATUS_NAMES[status] ?? `status ${status}`,
        opcode: status === 0 ? WC_OPCODES[opcode] : undefined,
        byteLen: v.getUint32(o + at.byteLen, true),
        qpNum: v.getUint32(o + at.qpNum, true),
      };
      // imm_data is big-endian on the wire and in the struct (__be32).
      if (flags & IBV.WC_WITH_IMM) wc.imm = v.getUint32(o + at.immData, false);
      out.push(wc);
    }
    return out;
  }

  /** Asks for one event on the channel at the next completion (then poll again before sleeping). */
  arm(): void {
    if (this.context.ops.reqNotifyCq(this.cq, 0) !== 0)
      fail(this.context.verbs, 'ibv_req_notify_cq', 'the completion queue is broken: reopen the device');
    this.armed = true;
  }

  /** Takes the channel's event after poll(2) said the fd is readable (it would block otherwise). */
  consumeEvent(): void {
    const v = this.context.verbs;
    const cq = [0n];
    const ctx = [0n];
    if (v.fn.ibv_get_cq_event(this.channel, cq, ctx) === 0) v.fn.ibv_ack_cq_events(this.cq, 1);
    this.armed = false;
  }

  close(): void {
    this.context.verbs.fn.ibv_destroy_cq(this.cq);
    this.context.verbs.fn.ibv_destroy_comp_channel(this.channel);
  }
}

export type QpType = 'rc' | 'uc';

/** What each side sends the other over the side channel to connect a queue pair. */
export interface QpEndpoint {
  qpNum: number;
  psn: number;
  gid: Uint8Array;
  /** verbs' MTU enum of the sender's port. */
  mtu: number;
}

export interface QpCaps {
  maxSendWr: number;
  maxRecvWr: number;
  maxSge: number;
  maxInline: number;
}

export function qpError(what: string, v: Verbs): never {
  fail(v, what, 'the queue pair attributes were refused: check both ends use the same provider and MTU');
}

export function checkQpType(type: string): QpType {
  if (type === 'rc' || type === 'uc') return type;
  throw new TandemError('INVALID_ARGUMENT', `unknown queue pair type ${type}`, { hint: 'use rc or uc' });
}
