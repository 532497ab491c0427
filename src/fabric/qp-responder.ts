import {
  frameAddrHi,
  frameAddrLo,
  frameFlags,
  frameImm,
  framePlacedLength,
  framePsn,
  frameReadLength,
  frameReservedZero,
  frameRkey,
  HeaderWriter,
  PLACED_WRITE_BYTES,
} from './frame-header.js';
import type { Region } from './memory.js';
import type { ReceiveQueue } from './receive-queue.js';
import type { RegionCheck } from './region-check.js';
import { copyRange } from './sgl-views.js';
import type { Transport } from './transport.js';
import type { DeviceStats, QpState } from './types.js';
import { Access } from './types.js';
import {
  FLAG_ACKREQ,
  FLAG_IMM,
  FLAG_MORE,
  FLAG_PLACED,
  FrameType,
  READ_REQ_BYTES,
  SEND_HEADER,
  StatusCode,
  WRITE_HEADER,
  type WireStatus,
} from './wire.js';

const NO_PAYLOAD: readonly Uint8Array[] = [];

/** What the responder needs of its queue pair. */
export interface ResponderHost {
  /** Requests are handled only while 'ready'; no ACK leaves once 'closed'. */
  readonly state: QpState;
  /** A protocol violation: the queue pair ends the connection. */
  malformed(what: string): void;
}

/**
 * A queue pair's responder: takes the peer's requests in sequence, validates every one-sided
 * request (region-check.ts) before touching memory, delivers SENDs and immediates to the
 * receive queue, and answers with cumulative ACKs (one per poll at most for those asked for
 * with FLAG_ACKREQ, the rest lazily) and NAKs for refusals.
 */
export class Responder {
  private readonly headers = new HeaderWriter();
  /** The psn the peer's next request must carry. */
  private expectPsn: number;
  /** An ACK was asked for (FLAG_ACKREQ): it goes out at the end of this poll (or batch), or with the next post. */
  private ackDue = false;
  /** Requests were received whose ACK was not asked for: it goes out with the next one, or on the timeout tick. */
  private ackLazy = false;
  /** Whether the frame being handled asked for an ACK. */
  private frameAsks = false;
  /** Payload length of the WRITE being received in place (one at a time per connection). */
  private placing = 0;
  private ackPsn = 0;

  constructor(
    private readonly host: ResponderHost,
    private readonly transport: Transport,
    private readonly regions: RegionCheck,
    private readonly receives: ReceiveQueue,
    private readonly stats: DeviceStats,
    firstPsn: number,
  ) {
    this.expectPsn = firstPsn >>> 0;
  }

  /** Sends the ACK that was asked for, if one is due. */
  flushIfDue(): void {
    if (this.ackDue) this.flushAck();
  }

  /** Sends the ACK of requests that did not ask for one (the timeout tick's job). */
  flushIfLazy(): void {
    if (this.ackLazy && this.host.state === 'ready') this.flushAck();
  }

  /** A large WRITE's target, if the header is in order and the request valid (else the normal path judges and counts it). */
  place(head: Uint8Array, bodyLength: number): Uint8Array | undefined {
    if (
      this.host.state !== 'ready' ||
      !frameReservedZero(head, 0) ||
      frameFlags(head, 0) & ~(FLAG_IMM | FLAG_ACKREQ)
    )
      return undefined;
    if (framePsn(head, 0) !== this.expectPsn) return undefined;
    const len = bodyLength - WRITE_HEADER;
    const target = this.regions.writeTarget(
      frameRkey(head, 0),
      frameAddrLo(head, 0),
      frameAddrHi(head, 0),
      len,
    );
    if (target !== undefined) this.placing = len;
    return target;
  }

  /**
   * A request frame (SEND, WRITE, READ_REQ or unknown) of `n` bytes at `o` of `b`, its common
   * header already checked by the queue pair. `placed`: a WRITE whose payload the decoder put in place.
   */
  onRequest(
    b: Uint8Array,
    o: number,
    n: number,
    type: number,
    flags: number,
    psn: number,
    placed: boolean,
  ): void {
    const host = this.host;
    if (psn !== this.expectPsn) return host.malformed(`sequence ${psn} where ${this.expectPsn} was expected`);
    this.expectPsn = (psn + 1) >>> 0;
    this.frameAsks = (flags & FLAG_ACKREQ) !== 0;
    if (type === FrameType.SEND) {
      if ((flags & ~(FLAG_MORE | FLAG_ACKREQ)) !== 0) return host.malformed(`SEND flags ${flags}`);
      const last = (flags & FLAG_MORE) === 0;
      if (!this.receives.onSend(b.subarray(o + SEND_HEADER, o + n), last))
        return this.nak(psn, 'remote_invalid');
      return this.ack(psn);
    }
    if (type === FrameType.WRITE) {
      if (n < WRITE_HEADER || (flags & ~(FLAG_IMM | FLAG_PLACED | FLAG_ACKREQ)) !== 0)
        return host.malformed('WRITE header truncated or bad flags');
      if ((flags & FLAG_PLACED) !== 0) {
        if (n !== PLACED_WRITE_BYTES || placed) return host.malformed('placed WRITE of the wrong size');
        return this.onPlacedWrite(b, o, (flags & FLAG_IMM) !== 0, psn);
      }
      return this.onWrite(b, o, n, (flags & FLAG_IMM) !== 0, psn, placed);
    }
    if (type === FrameType.READ_REQ) {
      if (n !== READ_REQ_BYTES || flags !== 0) return host.malformed(`READ request of ${n} bytes`);
      return this.onRead(b, o, psn);
    }
    host.malformed(`unknown frame type ${type}`);
  }

  /**
   * A WRITE the requester already copied into our shared region after validating it against
   * our published key table. We validate again (and count) so that a refusal is never
   * reported as success; the immediate, if any, is delivered as usual.
   */
  private onPlacedWrite(b: Uint8Array, o: number, withImm: boolean, psn: number): void {
    const len = framePlacedLength(b, o);
    const t = this.regions.remote(
      frameRkey(b, o),
      frameAddrLo(b, o),
      frameAddrHi(b, o),
      len,
      Access.REMOTE_WRITE,
    );
    if (typeof t === 'string') return this.nak(psn, t);
    this.placing = len;
    this.onWrite(b, o, WRITE_HEADER, withImm, psn, true);
  }

  private onWrite(b: Uint8Array, o: number, n: number, withImm: boolean, psn: number, placed: boolean): void {
    if (placed) {
      // validated by place() before the payload landed; only the immediate is left
      if (withImm) {
        const r = this.receives.take();
        if (r !== undefined) this.receives.complete(r, 'success', this.placing, frameImm(b, o));
        else if (!this.receives.stash(frameImm(b, o), this.placing)) {
          this.stats.rejectedInvalid++;
          return this.nak(psn, 'remote_invalid');
        }
      }
      return this.ack(psn);
    }
    const imm = withImm ? frameImm(b, o) : -1;
    this.write(
      psn,
      frameRkey(b, o),
      frameAddrLo(b, o),
      frameAddrHi(b, o),
      imm,
      b,
      o + WRITE_HEADER,
      n - WRITE_HEADER,
    );
  }

  /**
   * A WRITE frame (not placed) given by its header's fields, as a transport that reads
   * headers as words hands it over (TransportEvents.write): the checks of onRequest and
   * onWrite in the same order, on the fields.
   */
  onWriteFields(
    flags: number,
    psn: number,
    rkey: number,
    lo: number,
    hi: number,
    imm: number,
    b: Uint8Array,
    from: number,
    len: number,
  ): void {
    const host = this.host;
    if (psn !== this.expectPsn) return host.malformed(`sequence ${psn} where ${this.expectPsn} was expected`);
    this.expectPsn = (psn + 1) >>> 0;
    this.frameAsks = (flags & FLAG_ACKREQ) !== 0;
    if ((flags & ~(FLAG_IMM | FLAG_ACKREQ)) !== 0)
      return host.malformed('WRITE header truncated or bad flags');
    this.write(psn, rkey, lo, hi, (flags & FLAG_IMM) !== 0 ? imm : -1, b, from, len);
  }

  /** Validates and executes a WRITE of `len` bytes at `from` of `b`; `imm` -1 when it carries none. */
  private write(
    psn: number,
    rkey: number,
    lo: number,
    hi: number,
    imm: number,
    b: Uint8Array,
    from: number,
    len: number,
  ): void {
    const t = this.regions.remote(rkey, lo, hi, len, Access.REMOTE_WRITE);
    if (typeof t === 'string') return this.nak(psn, t);
    const dst = (this.regions.remoteRegion as Region).buffer;
    if (imm >= 0) {
      const r = this.receives.take();
      if (r === undefined && !this.receives.stash(imm, len)) {
        this.stats.rejectedInvalid++;
        return this.nak(psn, 'remote_invalid');
      }
      copyRange(dst, t, b, from, len);
      if (r !== undefined) this.receives.complete(r, 'success', len, imm);
    } else {
      copyRange(dst, t, b, from, len);
    }
    this.ack(psn);
  }

  private onRead(b: Uint8Array, o: number, psn: number): void {
    const len = frameReadLength(b, o);
    const t = this.regions.remote(
      frameRkey(b, o),
      frameAddrLo(b, o),
      frameAddrHi(b, o),
      len,
      Access.REMOTE_READ,
    );
    this.flushAck();
    const h = this.headers.response(FrameType.READ_RESP, psn, typeof t === 'string' ? StatusCode[t] : 0);
    if (typeof t === 'string') this.transport.send(h, NO_PAYLOAD);
    else this.transport.send(h, [(this.regions.remoteRegion as Region).buffer.subarray(t, t + len)]);
  }

  private ack(psn: number): void {
    if (this.frameAsks) this.ackDue = true;
    else this.ackLazy = true;
    this.ackPsn = psn;
  }

  /** Sends the cumulative ACK of every request handled so far, asked for or not. */
  private flushAck(): void {
    if (!(this.ackDue || this.ackLazy) || this.host.state === 'closed') return;
    this.ackDue = false;
    this.ackLazy = false;
    this.stats.acksSent++;
    this.transport.send(this.headers.response(FrameType.ACK, this.ackPsn, 0), NO_PAYLOAD);
  }

  private nak(psn: number, status: WireStatus): void {
    this.flushAck();
    this.stats.acksSent++;
    this.transport.send(this.headers.response(FrameType.ACK, psn, StatusCode[status]), NO_PAYLOAD);
  }
}
