import { randomInt } from 'node:crypto';
import { TandemError } from '../errors/index.js';
import {
  WR_OPCODES,
  wrIdHalves,
  qpError,
  type QpCaps,
  type QpEndpoint,
  type QpType,
  type RdmaCq,
  type RdmaPd,
} from './rdma-resources.js';
import { IBV, QP_ATTR } from './rdma-verbs-enums.js';
import type { RecvWr, SendWr } from './types.js';

/** Attributes of the transitions (verbs' units): ~67 ms ack timeout, 7 retries (peer loss in < 1 s). */
const ACK_TIMEOUT = 14;
const RETRY_COUNT = 7;
const RNR_RETRY = 7;
/** 12: 0.64 ms before a receiver-not-ready retry. */
const MIN_RNR_TIMER = 12;

/**
 * One RC or UC queue pair: created in RESET, moved INIT -> RTR -> RTS by connect() with the
 * peer's endpoint, and posting work requests encoded into one reused ibv_send_wr /
 * ibv_recv_wr (verbs copies a request into its queue before ibv_post_* returns).
 */
export class RdmaQp {
  readonly qp: bigint;
  readonly qpNum: number;
  /** This side's first packet sequence number: random 24-bit. */
  readonly psn = randomInt(0, 1 << 24);
  readonly caps: QpCaps;
  private readonly wr: Uint8Array;
  private readonly wrView: DataView;
  private readonly rwr: Uint8Array;
  private readonly rwrView: DataView;
  private readonly sges: Uint8Array;
  private readonly sgeView: DataView;
  private readonly sgesAddr: bigint;
  private readonly bad = new Uint8Array(8);

  constructor(
    readonly pd: RdmaPd,
    readonly type: QpType,
    sendCq: RdmaCq,
    recvCq: RdmaCq,
    want: QpCaps,
  ) {
    const v = pd.context.verbs;
    const L = v.layout;
    const init = new Uint8Array(L.size('ibv_qp_init_attr'));
    const iv = new DataView(init.buffer);
    iv.setBigUint64(L.offset('ibv_qp_init_attr', 'send_cq'), sendCq.cq, true);
    iv.setBigUint64(L.offset('ibv_qp_init_attr', 'recv_cq'), recvCq.cq, true);
    const cap = L.offset('ibv_qp_init_attr', 'cap');
    iv.setUint32(cap, want.maxSendWr, true);
    iv.setUint32(cap + 4, want.maxRecvWr, true);
    iv.setUint32(cap + 8, want.maxSge, true);
    iv.setUint32(cap + 12, want.maxSge, true);
    iv.setUint32(cap + 16, want.maxInline, true);
    iv.setInt32(L.offset('ibv_qp_init_attr', 'qp_type'), type === 'rc' ? IBV.QPT_RC : IBV.QPT_UC, true);
    this.qp = v.fn.ibv_create_qp(pd.pd, init);
    if (this.qp === 0n) qpError(`ibv_create_qp(${type})`, v);
    // ibv_create_qp writes back the capacities it granted (max_inline_data among them).
    this.caps = {
      maxSendWr: iv.getUint32(cap, true),
      maxRecvWr: iv.getUint32(cap + 4, true),
      maxSge: Math.min(iv.getUint32(cap + 8, true), iv.getUint32(cap + 12, true)),
      maxInline: iv.getUint32(cap + 16, true),
    };
    this.qpNum = v.readU32(this.qp, L.offset('ibv_qp_head', 'qp_num'));
    this.wr = new Uint8Array(L.size('ibv_send_wr'));
    this.wrView = new DataView(this.wr.buffer);
    this.rwr = new Uint8Array(L.size('ibv_recv_wr'));
    this.rwrView = new DataView(this.rwr.buffer);
    this.sges = new Uint8Array(L.size('ibv_sge') * Math.max(1, this.caps.maxSge));
    this.sgeView = new DataView(this.sges.buffer);
    this.sgesAddr = v.addressOf(this.sges);
  }

  /** What the peer needs from this side, with the GID chosen for it. */
  endpoint(gid: Uint8Array): QpEndpoint {
    return { qpNum: this.qpNum, psn: this.psn, gid, mtu: this.pd.context.port.activeMtu };
  }

  /** RESET -> INIT -> RTR -> RTS towards `peer`; the MTU is the smaller of both ports'. */
  connect(peer: QpEndpoint, sgidIndex: number, access: number): void {
    const ctx = this.pd.context;
    const rc = this.type === 'rc';
    this.modify(
      { state: IBV.QPS_INIT, port: ctx.portNum, access: rc ? access : access & ~IBV.ACCESS_REMOTE_READ },
      QP_ATTR.STATE | QP_ATTR.PKEY_INDEX | QP_ATTR.PORT | QP_ATTR.ACCESS_FLAGS,
      'INIT',
    );
    this.modify(
      {
        state: IBV.QPS_RTR,
        mtu: Math.min(peer.mtu, ctx.port.activeMtu),
        destQpn: peer.qpNum,
        rqPsn: peer.psn,
        dgid: peer.gid,
        sgidIndex,
        port: ctx.portNum,
      },
      QP_ATTR.STATE |
        QP_ATTR.AV |
        QP_ATTR.PATH_MTU |
        QP_ATTR.DEST_QPN |
        QP_ATTR.RQ_PSN |
        (rc ? QP_ATTR.MAX_DEST_RD_ATOMIC | QP_ATTR.MIN_RNR_TIMER : 0),
      'RTR',
    );
    this.modify(
      { state: IBV.QPS_RTS, sqPsn: this.psn },
      QP_ATTR.STATE |
        QP_ATTR.SQ_PSN |
        (rc ? QP_ATTR.TIMEOUT | QP_ATTR.RETRY_CNT | QP_ATTR.RNR_RETRY | QP_ATTR.MAX_QP_RD_ATOMIC : 0),
      'RTS',
    );
  }

  /** Moves the queue pair to ERR: every pending request completes with WR_FLUSH_ERR. */
  toError(): void {
    this.modify({ state: IBV.QPS_ERR }, QP_ATTR.STATE, 'ERR');
  }

  private modify(
    a: {
      state: number;
      port?: number;
      access?: number;
      mtu?: number;
      destQpn?: number;
      rqPsn?: number;
      sqPsn?: number;
      dgid?: Uint8Array;
      sgidIndex?: number;
    },
    mask: number,
    what: string,
  ): void {
    const v = this.pd.context.verbs;
    const L = v.layout;
    const b = new Uint8Array(L.size('ibv_qp_attr'));
    const d = new DataView(b.buffer);
    const o = (f: string): number => L.offset('ibv_qp_attr', f);
    d.setInt32(o('qp_state'), a.state, true);
    if (a.access !== undefined) d.setUint32(o('qp_access_flags'), a.access, true);
    if (a.port !== undefined) b[o('port_num')] = a.port;
    if (a.mtu !== undefined) d.setInt32(o('path_mtu'), a.mtu, true);
    if (a.destQpn !== undefined) d.setUint32(o('dest_qp_num'), a.destQpn, true);
    if (a.rqPsn !== undefined) d.setUint32(o('rq_psn'), a.rqPsn, true);
    if (a.sqPsn !== undefined) d.setUint32(o('sq_psn'), a.sqPsn, true);
    if (a.dgid !== undefined) {
      const ah = o('ah_attr');
      b.set(a.dgid, ah + L.offset('ibv_ah_attr', 'grh'));
      b[ah + L.offset('ibv_ah_attr', 'grh') + L.offset('ibv_global_route', 'sgid_index')] = a.sgidIndex ?? 0;
      b[ah + L.offset('ibv_ah_attr', 'grh') + L.offset('ibv_global_route', 'hop_limit')] = 64;
      b[ah + L.offset('ibv_ah_attr', 'is_global')] = 1;
      b[ah + L.offset('ibv_ah_attr', 'port_num')] = a.port ?? 1;
    }
    b[o('max_dest_rd_atomic')] = 1;
    b[o('min_rnr_timer')] = MIN_RNR_TIMER;
    b[o('timeout')] = ACK_TIMEOUT;
    b[o('retry_cnt')] = RETRY_COUNT;
    b[o('rnr_retry')] = RNR_RETRY;
    b[o('max_rd_atomic')] = 1;
    if (v.fn.ibv_modify_qp(this.qp, b, mask) !== 0) qpError(`ibv_modify_qp to ${what}`, v);
  }

  /** Posts `wr`; `tag` rides in wr_id's high bits (WR_TAG_SHIFT) and comes back in its completion. */
  postSend(wr: SendWr, tag = 0): void {
    if (this.type === 'uc' && wr.opcode === 'read') {
      throw new TandemError(
        'FABRIC_INVALID_REQUEST',
        'an unreliable-connected (UC) queue pair cannot RDMA READ',
        {
          hint: 'use write or send on UC queue pairs, or a device that offers RC',
        },
      );
    }
    const d = this.wrView;
    const n = this.fillSges(wr.sgl);
    const [lo, hi] = wrIdHalves(wr.wrId, tag);
    d.setUint32(0, lo, true);
    d.setUint32(4, hi, true);
    d.setBigUint64(8, 0n, true);
    d.setBigUint64(16, n > 0 ? this.sgesAddr : 0n, true);
    d.setInt32(24, n, true);
    d.setInt32(28, WR_OPCODES[wr.opcode], true);
    let flags = wr.signaled === false ? 0 : IBV.SEND_SIGNALED;
    if (wr.inline) flags |= IBV.SEND_INLINE;
    d.setUint32(32, flags, true);
    d.setUint32(36, wr.imm ?? 0, false);
    d.setBigUint64(40, wr.remote?.addr ?? 0n, true);
    d.setUint32(48, wr.remote?.rkey ?? 0, true);
    const rc = this.pd.context.ops.postSend(this.qp, this.wr, this.bad);
    if (rc !== 0) this.postFailed('ibv_post_send', rc);
  }

  postRecv(wr: RecvWr, tag = 0): void {
    const d = this.rwrView;
    const n = this.fillSges(wr.sgl);
    const [lo, hi] = wrIdHalves(wr.wrId, tag);
    d.setUint32(0, lo, true);
    d.setUint32(4, hi, true);
    d.setBigUint64(8, 0n, true);
    d.setBigUint64(16, n > 0 ? this.sgesAddr : 0n, true);
    d.setInt32(24, n, true);
    const rc = this.pd.context.ops.postRecv(this.qp, this.rwr, this.bad);
    if (rc !== 0) this.postFailed('ibv_post_recv', rc);
  }

  private fillSges(sgl: SendWr['sgl']): number {
    if (sgl.length > this.caps.maxSge) {
      throw new TandemError(
        'FABRIC_INVALID_REQUEST',
        `${sgl.length} SGEs exceed the queue pair's ${this.caps.maxSge}`,
        {
          hint: 'split the request or pack the data into fewer regions',
        },
      );
    }
    for (let i = 0; i < sgl.length; i++) {
      const s = sgl[i];
      if (s === undefined) continue;
      this.sgeView.setBigUint64(i * 16, s.addr, true);
      this.sgeView.setUint32(i * 16 + 8, s.length, true);
      this.sgeView.setUint32(i * 16 + 12, s.lkey, true);
    }
    return sgl.length;
  }

  private postFailed(verb: string, rc: number): never {
    const full = rc === 12;
    throw new TandemError(
      full ? 'FABRIC_QUEUE_FULL' : 'FABRIC_INVALID_REQUEST',
      `${verb} failed (errno ${rc})`,
      {
        hint: full
          ? 'wait for completions before posting more'
          : 'the queue pair is not ready or the request is malformed',
      },
    );
  }

  close(): void {
    this.pd.context.verbs.fn.ibv_destroy_qp(this.qp);
  }
}
