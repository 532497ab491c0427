import type { Socket } from 'node:net';
import { TandemError } from '../errors/index.js';
import type { CQ } from './completion-queue.js';
import { noteFailure } from './completions.js';
import type { RdmaDomain, RdmaRegion } from './rdma-memory.js';
import type { RdmaQp } from './rdma-qp.js';
import type { QpType, RawCompletion } from './rdma-resources.js';
import {
  Access,
  MAX_INLINE,
  type CompletionOpcode,
  type Opcode,
  type PoolSlice,
  type QpState,
  type QueuePair,
  type RecvWr,
  type RegistrationPool,
  type SendWr,
  type Sge,
  type WcStatus,
  type WorkCompletion,
} from './types.js';
import { checkRecvWr, checkSendWr } from './work-request-check.js';

/** What a queue pair of this type may post; anything else is refused before posting. */
export interface RdmaCapabilities {
  qpType: QpType;
  opcodes: readonly Opcode[];
  /** The device's max_inline_data for this queue pair; longer inline payloads are staged. */
  deviceInline: number;
}

export function capabilitiesOf(qpType: QpType, deviceInline: number): RdmaCapabilities {
  const opcodes: Opcode[] =
    qpType === 'rc' ? ['send', 'write', 'write_imm', 'read'] : ['send', 'write', 'write_imm'];
  return { qpType, opcodes, deviceInline };
}

/** Tag bits in wr_id (rdma-resources.ts WR_TAG_SHIFT): the opcode, then two flags. */
const TAG_OPCODES: readonly CompletionOpcode[] = ['send', 'write', 'write_imm', 'read', 'recv'];
const TAG_OPCODE_MASK = 7;
/** The payload was copied into a staging slice (an inline payload over the device's limit). */
const TAG_STAGED = 8;
/** The application asked for a completion on success. */
const TAG_SIGNALED = 16;

const STAGING_SLAB = 1 << 20;

/**
 * The fabric's QueuePair over one verbs RC or UC queue pair. The device's NIC validates
 * remote keys, rights and bounds and acknowledges; this class does what verbs leaves to the
 * application: shape and local-SGE checks before posting (a bad local SGE is
 * local_protection, as on every provider), inline payloads up to MAX_INLINE (the device's own
 * inline up to max_inline_data, staged copies above it), and the side channel as the peer's
 * liveness: its end (the peer process died or closed) moves the queue pair to ERR, which
 * flushes every pending request, and those completions report peer_lost.
 */
export class RdmaQueuePair implements QueuePair {
  readonly qpNum: number;
  readonly capabilities: RdmaCapabilities;
  private qpState: QpState = 'ready';
  /** What requests complete with once the queue pair left 'ready'. */
  private errorStatus: WcStatus = 'flushed';
  private reason = '';
  private staging: RegistrationPool | undefined;
  /** Staged slices in posting order; their completions arrive in the same order. */
  private readonly staged: PoolSlice[] = [];

  constructor(
    readonly qp: RdmaQp,
    readonly pd: RdmaDomain,
    private readonly cq: CQ,
    private readonly recvCq: CQ,
    private readonly socket: Socket,
    readonly peerInfo: Readonly<Record<string, unknown>>,
    private readonly onClosed: (qp: RdmaQueuePair) => void,
  ) {
    this.qpNum = qp.qpNum;
    this.capabilities = capabilitiesOf(qp.type, qp.caps.maxInline);
    const lost = (): void =>
      this.peerLost('the side channel to the peer ended (its process exited or closed)');
    socket.on('close', lost);
    socket.on('error', lost);
    // nothing more is said on the side channel; reading keeps its end (EOF) visible
    socket.on('data', () => {});
    socket.setKeepAlive(true, 1000);
  }

  get state(): QpState {
    return this.qpState;
  }

  postSend(wr: SendWr): void {
    checkSendWr(wr);
    if (!this.capabilities.opcodes.includes(wr.opcode)) {
      throw new TandemError(
        'FABRIC_INVALID_REQUEST',
        `a ${this.capabilities.qpType.toUpperCase()} queue pair cannot ${wr.opcode} (it offers ${this.capabilities.opcodes.join(', ')})`,
        { hint: 'use write or send on UC queue pairs, or a device that offers RC' },
      );
    }
    if (this.qpState !== 'ready') return this.complete(this.cq, wr.wrId, this.errorStatus, wr.opcode);
    for (const sge of wr.sgl) {
      if (this.localRegion(sge, wr.opcode === 'read') === undefined) {
        this.enterError('flushed', `local_protection on work request ${wr.wrId}`);
        return this.complete(this.cq, wr.wrId, 'local_protection', wr.opcode);
      }
    }
    const signaled = wr.signaled === false ? 0 : TAG_SIGNALED;
    const tag = TAG_OPCODES.indexOf(wr.opcode) | signaled;
    if (wr.inline !== true || totalLength(wr.sgl) <= this.capabilities.deviceInline) {
      this.qp.postSend(wr, tag);
      return;
    }
    const slice = this.stage(wr.sgl);
    try {
      this.qp.postSend({ ...wr, sgl: [slice.sge()], inline: false, signaled: true }, tag | TAG_STAGED);
    } catch (e) {
      slice.release();
      throw e;
    }
    this.staged.push(slice);
  }

  postRecv(wr: RecvWr): void {
    checkRecvWr(wr);
    if (this.qpState !== 'ready') return this.complete(this.recvCq, wr.wrId, this.errorStatus, 'recv');
    for (const sge of wr.sgl)
      if (this.localRegion(sge, true) === undefined)
        return this.complete(this.recvCq, wr.wrId, 'local_protection', 'recv');
    this.qp.postRecv(wr, TAG_OPCODES.indexOf('recv'));
  }

  /** The live region of this domain that holds `sge` (with LOCAL_WRITE when it is written). */
  private localRegion(sge: Sge, written: boolean): RdmaRegion | undefined {
    const r = this.pd.table.byLkey.get(sge.lkey);
    if (r === undefined || !r.live || r.pd !== this.pd || r.offsetOf(sge.addr, sge.length) < 0)
      return undefined;
    return written && (r.access & Access.LOCAL_WRITE) === 0 ? undefined : r;
  }

  /** Copies an inline payload longer than the device's inline limit into registered memory. */
  private stage(sgl: readonly Sge[]): PoolSlice {
    const total = totalLength(sgl);
    if (total > MAX_INLINE) throw new Error(`unreachable: inline of ${total} bytes passed checkSendWr`);
    this.staging ??= this.pd.createPool({ access: Access.LOCAL_WRITE, chunkBytes: STAGING_SLAB });
    const slice = this.staging.acquire(Math.max(1, total));
    let at = 0;
    for (const sge of sgl) {
      const r = this.pd.table.byLkey.get(sge.lkey) as RdmaRegion;
      const off = r.offsetOf(sge.addr, sge.length);
      slice.view.set(r.buffer.subarray(off, off + sge.length), at);
      at += sge.length;
    }
    return slice;
  }

  /** A completion from the device's completion queue for this queue pair. */
  onCompletion(raw: RawCompletion): void {
    const tagged = TAG_OPCODES[raw.tag & TAG_OPCODE_MASK] ?? 'send';
    const recv = tagged === 'recv';
    if (raw.tag & TAG_STAGED) this.staged.shift()?.release();
    let status = raw.status;
    if (status === 'success' && !recv && (raw.tag & TAG_SIGNALED) === 0) return;
    if (status === 'flushed' && this.errorStatus === 'peer_lost') status = 'peer_lost';
    if (status !== 'success' && this.qpState === 'ready')
      this.enterError(
        status === 'peer_lost' ? 'peer_lost' : 'flushed',
        `${raw.verbsStatus} on work request ${raw.wrId}`,
      );
    const opcode = recv ? (raw.opcode ?? 'recv') : tagged;
    const out: WorkCompletion = { wrId: raw.wrId, status, opcode, byteLen: raw.byteLen, qpNum: this.qpNum };
    if (raw.imm !== undefined) out.imm = raw.imm;
    if (status !== 'success') noteFailure(out, `${raw.verbsStatus}; ${this.reason}`);
    (recv ? this.recvCq : this.cq).push(out);
  }

  private complete(cq: CQ, wrId: number, status: WcStatus, opcode: CompletionOpcode): void {
    const wc = { wrId, status, opcode, byteLen: 0, qpNum: this.qpNum };
    if (status !== 'success') noteFailure(wc, this.reason || status);
    cq.push(wc);
  }

  /** Leaves 'ready': the verbs queue pair goes to ERR, so the device flushes what is pending. */
  private enterError(status: WcStatus, reason: string): void {
    if (this.qpState !== 'ready') return;
    this.qpState = 'error';
    this.errorStatus = status;
    this.reason = reason;
    try {
      this.qp.toError();
    } catch {
      // a queue pair the device already put in ERR: its requests are flushed all the same
    }
  }

  private peerLost(reason: string): void {
    this.enterError('peer_lost', reason);
  }

  async close(): Promise<void> {
    if (this.qpState === 'closed') return;
    this.enterError('flushed', 'closed by this side');
    this.qpState = 'closed';
    this.socket.destroy();
    this.staging?.close();
    this.onClosed(this);
  }
}

function totalLength(sgl: readonly Sge[]): number {
  let n = 0;
  for (const s of sgl) n += s.length;
  return n;
}
