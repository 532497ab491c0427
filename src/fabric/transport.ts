/**
 * A reliable, ordered frame pipe between two queue pairs: what each provider supplies
 * (an in-memory queue, a shared-memory ring, a TCP stream). The queue pair engine on top
 * does sequencing, validation and completions identically for all of them.
 */
export interface TransportEvents {
  /** One whole frame body: bytes `[off, off+len)` of `buf`, valid only during the call. */
  frame(buf: Uint8Array, off: number, len: number): void;
  /**
   * Optional: one whole WRITE frame without FLAG_PLACED, given by its header's fields (read
   * by the transport, its reserved bytes 0) and its payload, `len` bytes at `off` of `buf`
   * (valid only during the call). A transport that reads headers as words (shm) hands such
   * frames here instead of to frame(); the queue pair checks them as frame() would.
   */
  write?(
    flags: number,
    psn: number,
    rkey: number,
    addrLo: number,
    addrHi: number,
    imm: number,
    buf: Uint8Array,
    off: number,
    len: number,
  ): void;
  /** A burst of frames ended: a good moment to send a cumulative ACK. */
  batchEnd(): void;
  /** A large WRITE's header, before its payload: a validated target view, or undefined. */
  place?(head: Uint8Array, bodyLength: number): Uint8Array | undefined;
  /** The payload of a placed WRITE has arrived. */
  placed?(head: Uint8Array): void;
  /** The pipe is gone. `reason` is for messages; `malformed` when a bad frame ended it. */
  closed(reason: string, malformed: boolean): void;
}

export interface Transport {
  bind(events: TransportEvents): void;
  /**
   * Sends one frame: body = header ++ payload. Data is copied or sent before completion; a
   * payload of at most MAX_INLINE bytes (types.ts) is copied before send returns.
   */
  send(header: Uint8Array, payload: readonly Uint8Array[]): void;
  /** Optional: send() with one payload given as `len` bytes at `off` of `src` (no view to build). */
  sendFrom?(header: Uint8Array, src: Uint8Array, off: number, len: number): void;
  /**
   * Optional: sendFrom() of a WRITE frame given by its header's fields (HeaderWriter.write's
   * arguments), so a transport may store the header straight into its pipe (shm: as words).
   */
  sendWrite?(
    flags: number,
    psn: number,
    rkey: number,
    addrLo: number,
    addrHi: number,
    imm: number,
    src: Uint8Array,
    off: number,
    len: number,
  ): void;
  /** Optional: gather the frames sent until uncork() (one post and its ACK) into one write. */
  cork?(): void;
  uncork?(): void;
  /** Test hook: puts raw bytes on the wire, bypassing the framing. */
  sendRaw(bytes: Uint8Array): void;
  /**
   * Optional one-sided placement (shm): copies `parts` straight into the peer's registered
   * region when the requester can validate it (live key of the peer's domain, REMOTE_WRITE,
   * in bounds) and no earlier request frame is still unread; false: send the payload instead.
   * True means the data is in place: the queue pair completes the write without the
   * responder's ACK (in posting order).
   */
  writeDirect?(rkey: number, hi: number, lo: number, parts: readonly Uint8Array[], length: number): boolean;
  /**
   * Optional (shm): a small unsignaled WRITE (`length` bytes of `src` from `off`, at most
   * the provider's limit) placed in the peer's region with no frame at all, when the requester
   * can validate it as for writeDirect and no unread request touches the same bytes; false:
   * frame it as usual. Nothing completes and the responder never hears of it: the bytes are
   * simply there, the first ones first and the last ones last, as an RDMA WRITE's land for a
   * peer that polls its memory.
   */
  placeSmall?(rkey: number, hi: number, lo: number, src: Uint8Array, off: number, length: number): boolean;
  /** Drives progress without the event loop; true when anything happened. */
  poll?(): boolean;
  close(): void;
}
