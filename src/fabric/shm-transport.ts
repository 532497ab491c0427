import type { Socket } from 'node:net';
import { SHM_RING_HEADER_BYTES as DATA } from './footprint.js';
import { randomU32 } from './random.js';
import { ShmSegment } from './shm-ffi.js';
import { ShmKeyTable } from './shm-key-table.js';
import { UnreadWrites } from './shm-unread-writes.js';
import { MSG_DONTWAIT, MSG_NOSIGNAL, rawSocketLib } from './socket-ffi.js';
import type { Transport, TransportEvents } from './transport.js';
import { FrameDecoder, MalformedFrame } from './frame-decoder.js';
import {
  frameAddrHi,
  frameAddrLo,
  frameFlags,
  frameRkey,
  frameType,
  HeaderWriter,
  putWriteWords,
  WORDS_ARE_WIRE_ORDER,
  writeWordsFlags,
  writeWordsLength,
} from './frame-header.js';
import { FLAG_PLACED, FrameType, MAX_BODY, putU32, WRITE_HEADER } from './wire.js';
import { Access, MAX_INLINE } from './types.js';
import { copyBytes } from '../kernels/copy.js';

/**
 * Segment layout (byte offsets): a receive ring is
 *   0 write index (i32, producer) | 64 read index (i32, consumer) | 128 closed flag | 4096.. data
 * indices count bytes mod 2^32; the data size is a power of two. A device's bell segment holds
 *   0 doorbell flag (i32): set by a device about to sleep (or gone idle), then it re-checks its
 *     rings; a producer that publishes a frame and finds it set exchanges it to 0 and knocks: one
 *     byte on the side-channel socket, which wakes the sleeper's event loop (no lost wake-up:
 *     either the re-check sees the frame or the producer sees the flag).
 */
const W = 0;
const R = 16;
const CLOSED = 32;
export const SLEEPING = 0;
/** Writes at least this long are copied straight into a published peer region. */
const DIRECT_MIN = 64 * 1024;
/**
 * The longest unsignaled WRITE placed with no frame at all (Transport.placeSmall): a board
 * entry of a 16 KiB all-reduce (docs/collectives.md) with its head and tail.
 */
export const PLACE_SMALL_MAX = 32 * 1024;
/** placeSmall() copies this many bytes at each end of a write one by one, in ascending order. */
const PLACE_EDGE = 64;
const TWO32 = 4294967296;
/**
 * Up to this many bytes a plain loop copies faster than TypedArray.set, whose call into a
 * shared buffer costs more than a frame header's stores (docs/fabric.md).
 */
const SMALL_COPY = 64;
/** While the application is active, rings are also polled this often (acks, reads for a busy peer). */
export const TICK_MS = 1;
const KNOCK = new Uint8Array([1]);
/**
 * x86's memory order (TSO): a plain load is an acquire and a plain store a release, and V8
 * keeps typed-array accesses in program order, so on x86 the hot path reads the indices and
 * the doorbell and publishes the read index with plain accesses, where Atomics.load/store are
 * calls into V8 builtins as Node 20 compiles them (docs/fabric.md). A write
 * index is still published with Atomics.store (its full fence orders it before the doorbell
 * load that follows: a sleeper re-checks the rings after arming, see ring()). Elsewhere
 * (arm64: loads and stores may pass each other) everything stays Atomics.
 */
const TSO = process.arch === 'x64' || process.arch === 'ia32';

/**
 * A new segment's name: '/tandem-PID-RANDOM-KIND', at most 29 characters (a 7-digit pid, 8 hex
 * digits, a kind of up to 4 letters), inside macOS's 31. The pid lets a sweep find the
 * segments of dead processes; the random part keeps one process's names apart (a repeat
 * would fail shm_open's O_EXCL, never share a segment).
 */
export const segName = (kind: string): string => `/tandem-${process.pid}-${randomU32().toString(16)}-${kind}`;

/** Rings are mapped whole at connection time (their frames stream through every page). */
export const POPULATED = { populate: true } as const;
const PAGE = 4096;

/** One direction each way: we consume `mine`, produce into `theirs`, and ring `peerBell`. */
export class ShmTransport implements Transport {
  private events: TransportEvents | undefined;
  private isClosed = false;
  private readonly decoder = new FrameDecoder(
    (buf, off, len) => this.events?.frame(buf, off, len),
    (head, len) => this.events?.place?.(head, len),
    (head) => this.events?.placed?.(head),
  );
  private readonly inCtl: Int32Array;
  private readonly inData: Uint8Array;
  /** inData as words. */
  private readonly inWords: Int32Array;
  private readonly outCtl: Int32Array;
  private readonly outData: Uint8Array;
  /** outData as words (its length is a power of two, at least a page). */
  private readonly outWords: Int32Array;
  /** For sendWrite() when the frame cannot go as words. */
  private readonly headers = new HeaderWriter();
  private readonly bellCtl: Int32Array;
  private readonly mask: number;
  private readIdx = 0;
  private writeIdx = 0;
  /** The peer's read index as last seen (see room()). */
  private peerRead = 0;
  /** Bytes that did not fit in the peer's ring yet, oldest first. */
  private backlog: Uint8Array[] = [];
  /** Stream position after everything sent. */
  private streamPos = 0;
  private readonly unread: UnreadWrites;
  private readonly peerKeyTable: ShmKeyTable;
  private readonly peerRegions = new Map<string, ShmSegment>();
  /** The side-channel socket's fd, for knocking without the event loop (-1: use socket.write). */
  private fd = -1;

  constructor(
    private readonly mine: ShmSegment,
    private readonly theirs: ShmSegment,
    private readonly peerBell: ShmSegment,
    private readonly peerKeys: ShmSegment,
    private readonly peerPd: number,
    private readonly socket: Socket,
    private readonly onClose: (t: ShmTransport) => void,
    private readonly onKnock: () => void,
  ) {
    this.peerKeyTable = new ShmKeyTable(peerKeys.buffer);
    this.inCtl = new Int32Array(mine.buffer, 0, DATA / 4);
    this.inData = new Uint8Array(mine.buffer, DATA, mine.length - DATA);
    this.inWords = new Int32Array(mine.buffer, DATA, (mine.length - DATA) >>> 2);
    this.outCtl = new Int32Array(theirs.buffer, 0, DATA / 4);
    this.outData = new Uint8Array(theirs.buffer, DATA, theirs.length - DATA);
    this.outWords = new Int32Array(theirs.buffer, DATA, (theirs.length - DATA) >>> 2);
    this.bellCtl = new Int32Array(peerBell.buffer, 0, 16);
    this.mask = this.inData.length - 1;
    this.writeIdx = Atomics.load(this.outCtl, W) >>> 0;
    this.peerRead = Atomics.load(this.outCtl, R) >>> 0;
    this.streamPos = this.writeIdx;
    this.unread = new UnreadWrites(this.writeIdx);
    this.touchRings();
  }

  /**
   * Touches every page of both rings once, before the first frame: written (zeros; nothing is
   * in the peer's ring yet and only this side writes it) and read. The first touch of a page
   * is slow even when the mapping is populated (a virtual machine's page tables), and a ring
   * that streams small frames would reach a fresh page every few dozen frames for its whole
   * first lap: touched here, the cost is paid once at connection (figures in docs/fabric.md).
   */
  private touchRings(): void {
    const out = this.outData;
    for (let i = 0; i < out.length; i += PAGE) out[i] = 0;
    const inData = this.inData;
    let sum = 0;
    for (let i = 0; i < inData.length; i += PAGE) sum += inData[i] as number;
    this.touched = sum;
  }

  /** What touchRings() read (kept so the reads are not optimised away). */
  private touched = 0;

  writeDirect(rkey: number, hi: number, lo: number, parts: readonly Uint8Array[], length: number): boolean {
    if (length < DIRECT_MIN || this.isClosed) return false;
    // an earlier request still unread by the peer could touch the same memory: keep order
    if (!this.unread.allows(Atomics.load(this.outCtl, R) >>> 0, rkey >>> 0, hi >>> 0, lo >>> 0, length))
      return false;
    const at = this.peerRegion(rkey, hi, lo, length);
    if (at < 0) return false;
    const dst = new Uint8Array((this.target as ShmSegment).buffer, at, length);
    let pos = 0;
    for (const p of parts) {
      copyBytes(dst, pos, p);
      pos += p.length;
    }
    return true;
  }

  placeSmall(rkey: number, hi: number, lo: number, src: Uint8Array, off: number, length: number): boolean {
    if (length > PLACE_SMALL_MAX || this.isClosed) return false;
    if (!this.unread.allows(Atomics.load(this.outCtl, R) >>> 0, rkey >>> 0, hi >>> 0, lo >>> 0, length))
      return false;
    const at = this.peerRegion(rkey, hi, lo, length);
    if (at < 0) return false;
    // the first bytes land first and the last bytes last, each edge in ascending order (what a
    // poller of them relies on); the middle goes in one copy, in whatever order it takes
    // (plain stores: x86 makes them visible in program order)
    const dst = this.targetBytes as Uint8Array;
    const head = Math.min(length, PLACE_EDGE);
    const tail = Math.max(head, length - PLACE_EDGE);
    // the edges in whole words when both ends are 4-byte aligned (a board entry's 28 bytes in 7 stores)
    const words = ((at | off | length | src.byteOffset) & 3) === 0;
    if (words) this.copyWords(src, off, at, 0, head);
    else for (let i = 0; i < head; i++) dst[at + i] = src[off + i] as number;
    if (tail > head) dst.set(src.subarray(off + head, off + tail), at + head);
    if (words) this.copyWords(src, off, at, tail, length);
    else for (let i = tail; i < length; i++) dst[at + i] = src[off + i] as number;
    this.ring(); // a peer asleep on its doorbell wakes to look (it may be polling for these bytes)
    return true;
  }

  /** Bytes [from, to) of a write from `src` at `off` to the target at `at`, as words in ascending order (all 4-byte aligned). */
  private copyWords(src: Uint8Array, off: number, at: number, from: number, to: number): void {
    const dst = this.targetWords as Int32Array;
    const words = this.wordsOf(src);
    for (let i = from >>> 2, d = at >>> 2, o = off >>> 2, n = to >>> 2; i < n; i++)
      dst[d + i] = words[o + i] as number;
  }

  /** `src` (4-byte aligned) as words; the view of the last source is kept, so repeated writes from one buffer build none. */
  private wordsOf(src: Uint8Array): Int32Array<ArrayBufferLike> {
    if (src !== this.lastSrc) {
      this.lastSrc = src;
      this.lastSrcWords = new Int32Array(src.buffer, src.byteOffset, src.byteLength >>> 2);
    }
    return this.lastSrcWords;
  }

  private lastSrc: Uint8Array | undefined;
  private lastSrcWords: Int32Array<ArrayBufferLike> = new Int32Array(0);

  /** The peer's region the last direct write went to: its key-table entry, as validated then, and its segment. */
  private target: ShmSegment | undefined;
  private targetBytes: Uint8Array | undefined;
  private targetWords: Int32Array | undefined;
  private targetSlot = -1;
  private targetKey = 0;
  private targetHi = 0;
  private targetLo = 0;
  private targetLength = 0;

  /**
   * Where `length` bytes at (hi, lo) under `rkey` start in the peer's region (this.target,
   * mapped here on first use), or -1 when the requester cannot validate the write itself: the
   * key is not live in the peer's key table, belongs to another domain, lacks REMOTE_WRITE,
   * or the range is out of bounds. The entry of the last region is remembered, and re-checked
   * (state, key, address, length) on every use.
   */
  private peerRegion(rkey: number, hi: number, lo: number, length: number): number {
    const k = this.peerKeyTable;
    let slot = this.targetSlot;
    if (
      slot < 0 ||
      this.targetKey !== (rkey | 0) ||
      !k.live(slot) ||
      k.rkey(slot) !== (rkey | 0) ||
      k.addrHi(slot) !== this.targetHi ||
      k.addrLo(slot) !== this.targetLo ||
      k.length(slot) !== this.targetLength
    ) {
      slot = this.findPeerKey(rkey);
      if (slot < 0) return -1;
    }
    if (k.pdId(slot) !== this.peerPd || (k.access(slot) & Access.REMOTE_WRITE) === 0) return -1;
    const off = (hi - (k.addrHi(slot) >>> 0)) * TWO32 + (lo - (k.addrLo(slot) >>> 0));
    if (!(off >= 0) || off + length > this.targetLength) return -1;
    return off;
  }

  /** Looks `rkey` up in the peer's key table and maps its segment; the entry's slot, or -1. */
  private findPeerKey(rkey: number): number {
    const k = this.peerKeyTable;
    this.targetSlot = -1;
    const slot = k.find(rkey);
    if (slot < 0) return -1;
    const regionLength = k.length(slot);
    const name = k.name(slot);
    let seg = this.peerRegions.get(name);
    if (seg === undefined) {
      try {
        seg = ShmSegment.open(name, regionLength);
      } catch {
        return -1;
      }
      this.peerRegions.set(name, seg);
    }
    if (!k.live(slot)) return -1;
    this.target = seg;
    this.targetBytes = new Uint8Array(seg.buffer, 0, regionLength);
    this.targetWords = new Int32Array(seg.buffer, 0, regionLength >>> 2);
    this.targetSlot = slot;
    this.targetKey = rkey | 0;
    this.targetHi = k.addrHi(slot);
    this.targetLo = k.addrLo(slot);
    this.targetLength = regionLength;
    return slot;
  }

  bind(events: TransportEvents): void {
    this.events = events;
    this.socket.on('close', () => this.shut('the peer closed the connection', false));
    this.socket.on('error', () => undefined);
    this.socket.on('data', () => this.onKnock());
    this.fd = (this.socket as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
  }

  poll(): boolean {
    if (this.isClosed) return false;
    let did = this.backlog.length > 0 && this.flush();
    const w = (TSO ? (this.inCtl[W] as number) : Atomics.load(this.inCtl, W)) >>> 0;
    const avail = (w - this.readIdx) >>> 0;
    if (avail === 0) {
      if ((TSO ? this.inCtl[CLOSED] : Atomics.load(this.inCtl, CLOSED)) !== 0)
        this.shut('the peer closed the connection', false);
      return did;
    }
    const r = this.readWrites(this.readIdx, w);
    if (this.isClosed) return true;
    const left = (w - r) >>> 0;
    const pos = r & this.mask;
    const first = Math.min(left, this.inData.length - pos);
    try {
      if (left > 0) this.decoder.push(this.inData, pos, pos + first);
      if (left > first && !this.isClosed) this.decoder.push(this.inData, 0, left - first);
    } catch (e) {
      if (!(e instanceof MalformedFrame)) throw e;
      this.shut(`malformed frame: ${e.message}`, true);
      return true;
    }
    if (this.isClosed) return true;
    this.readIdx = w;
    if (TSO) this.inCtl[R] = w | 0;
    else Atomics.store(this.inCtl, R, w | 0);
    this.events?.batchEnd();
    if (this.backlog.length > 0) this.flush();
    did = true;
    return did;
  }

  /**
   * Hands the WRITE frames from stream position `r` on to events.write, their headers read as
   * words, while they are word aligned, whole before `w` and before the ring's end; returns
   * where it stopped, for the decoder to take the rest (any other frame, or a frame the
   * decoder would refuse: it is the one that judges and reports malformed frames).
   */
  private readWrites(r: number, w: number): number {
    const write = this.events?.write;
    if (write === undefined || !WORDS_ARE_WIRE_ORDER || this.decoder.midFrame) return r;
    const words = this.inWords;
    const size = this.inData.length;
    while (r !== w) {
      const pos = r & this.mask;
      if ((pos & 3) !== 0) break;
      const at = pos >>> 2;
      const len = writeWordsLength(words, at);
      if (len < WRITE_HEADER || len > MAX_BODY || len + 4 > (w - r) >>> 0 || pos + 4 + len > size) break;
      const flags = writeWordsFlags(words, at);
      const psn = (words[at + 2] as number) >>> 0;
      const rkey = (words[at + 3] as number) >>> 0;
      const lo = (words[at + 4] as number) >>> 0;
      const hi = (words[at + 5] as number) >>> 0;
      const imm = (words[at + 6] as number) >>> 0;
      write(flags, psn, rkey, lo, hi, imm, this.inData, pos + 4 + WRITE_HEADER, len - WRITE_HEADER);
      r = (r + 4 + len) >>> 0;
      if (this.isClosed) break;
    }
    return r;
  }

  send(header: Uint8Array, payload: readonly Uint8Array[]): void {
    if (this.isClosed) return;
    let len = header.length;
    for (let i = 0; i < payload.length; i++) len += (payload[i] as Uint8Array).length;
    this.streamPos = (this.streamPos + 4 + len) >>> 0;
    this.track(header, len - header.length);
    if (this.backlog.length === 0 && this.room(4 + len)) {
      // the whole frame fits: copy it straight into the ring and publish it with one store
      let w = this.put32(this.writeIdx, len);
      w = this.put(w, header);
      for (let i = 0; i < payload.length; i++) w = this.put(w, payload[i] as Uint8Array);
      this.writeIdx = w;
      Atomics.store(this.outCtl, W, w | 0);
      this.ring();
      return;
    }
    // no room: what waits in the backlog is copied if it is small (inline, see Transport.send)
    const parts = len - header.length <= MAX_INLINE ? payload.map((p) => p.slice()) : payload;
    const prefix = new Uint8Array(4 + header.length);
    putU32(prefix, 0, len);
    prefix.set(header, 4);
    if (this.backlog.length === 0) {
      const rest = this.write(prefix, parts);
      if (rest !== undefined) this.backlog = rest;
    } else {
      this.backlog.push(prefix, ...parts);
    }
    this.ring();
  }

  sendFrom(header: Uint8Array, src: Uint8Array, off: number, len: number): void {
    if (this.isClosed) return;
    const total = header.length + len;
    if (this.backlog.length > 0 || !this.room(4 + total)) {
      this.send(header, [src.subarray(off, off + len)]);
      return;
    }
    this.streamPos = (this.streamPos + 4 + total) >>> 0;
    this.track(header, len);
    let w = this.put32(this.writeIdx, total);
    w = this.put(w, header);
    const data = this.outData;
    const pos = w & this.mask;
    if (len <= SMALL_COPY && pos + len <= data.length) {
      for (let i = 0; i < len; i++) data[pos + i] = src[off + i] as number;
      w = (w + len) >>> 0;
    } else {
      w = this.put(w, src.subarray(off, off + len));
    }
    this.writeIdx = w;
    Atomics.store(this.outCtl, W, w | 0);
    this.ring();
  }

  /**
   * A WRITE frame from its header's fields: when the stream position is word aligned and the
   * frame fits before the ring's end, the length prefix and header go in as 7 word stores
   * (frames whose bodies are whole words, as 8 B and 64 B writes and every ACK are, keep the
   * position aligned); otherwise through HeaderWriter and sendFrom().
   */
  sendWrite(
    flags: number,
    psn: number,
    rkey: number,
    addrLo: number,
    addrHi: number,
    imm: number,
    src: Uint8Array,
    off: number,
    len: number,
  ): void {
    const total = WRITE_HEADER + len;
    const w = this.writeIdx;
    const pos = w & this.mask;
    const data = this.outData;
    if (
      !WORDS_ARE_WIRE_ORDER ||
      (pos & 3) !== 0 ||
      len > SMALL_COPY ||
      pos + 4 + total > data.length ||
      this.isClosed ||
      this.backlog.length > 0 ||
      !this.room(4 + total)
    )
      return this.sendFrom(this.headers.write(flags, psn, rkey, addrLo, addrHi, imm), src, off, len);
    this.streamPos = (this.streamPos + 4 + total) >>> 0;
    if ((flags & FLAG_PLACED) === 0)
      this.unread.write(this.streamPos, rkey >>> 0, addrHi >>> 0, addrLo >>> 0, len);
    const end = (w + 4 + total) >>> 0;
    putWriteWords(this.outWords, pos >>> 2, total, flags, psn, rkey, addrLo, addrHi, imm);
    const at = pos + 4 + WRITE_HEADER;
    for (let i = 0; i < len; i++) data[at + i] = src[off + i] as number;
    this.writeIdx = end;
    Atomics.store(this.outCtl, W, end | 0);
    this.ring();
  }

  sendRaw(bytes: Uint8Array): void {
    if (this.isClosed) return;
    this.streamPos = (this.streamPos + bytes.length) >>> 0;
    this.unread.barrier(this.streamPos);
    this.backlog.push(bytes.slice());
    this.flush();
  }

  /** Notes a frame that ends at the current stream position and carries `payload` bytes. */
  private track(header: Uint8Array, payload: number): void {
    const type = frameType(header, 0);
    if (type === FrameType.WRITE && (frameFlags(header, 0) & FLAG_PLACED) === 0)
      this.unread.write(
        this.streamPos,
        frameRkey(header, 0),
        frameAddrHi(header, 0),
        frameAddrLo(header, 0),
        payload,
      );
    else if (type === FrameType.SEND || type === FrameType.READ_REQ) this.unread.barrier(this.streamPos);
  }

  /**
   * Whether `n` bytes fit in the peer's ring. The peer's read index is re-read only when the
   * cached one says no: its cache line moves between the cores on every read otherwise.
   */
  private room(n: number): boolean {
    const size = this.outData.length;
    if (size - ((this.writeIdx - this.peerRead) >>> 0) >= n) return true;
    this.peerRead = (TSO ? (this.outCtl[R] as number) : Atomics.load(this.outCtl, R)) >>> 0;
    return size - ((this.writeIdx - this.peerRead) >>> 0) >= n;
  }

  /** Copies `src` into the peer's ring at stream index `w` (space checked by the caller). */
  private put(w: number, src: Uint8Array): number {
    const n = src.length;
    const data = this.outData;
    const pos = w & this.mask;
    if (n <= SMALL_COPY && pos + n <= data.length) {
      for (let i = 0; i < n; i++) data[pos + i] = src[i] as number;
    } else {
      const first = Math.min(n, data.length - pos);
      copyBytes(data, pos, first === n ? src : src.subarray(0, first));
      if (n > first) copyBytes(data, 0, src.subarray(first));
    }
    return (w + n) >>> 0;
  }

  private put32(w: number, v: number): number {
    const data = this.outData;
    const m = this.mask;
    data[w & m] = v;
    data[(w + 1) & m] = v >>> 8;
    data[(w + 2) & m] = v >>> 16;
    data[(w + 3) & m] = v >>> 24;
    return (w + 4) >>> 0;
  }

  /** Copies as much as fits into the peer's ring; returns what is left. */
  private write(prefix: Uint8Array, payload: readonly Uint8Array[]): Uint8Array[] | undefined {
    const r = Atomics.load(this.outCtl, R) >>> 0;
    let free = this.outData.length - ((this.writeIdx - r) >>> 0);
    let w = this.writeIdx;
    let rest: Uint8Array[] | undefined;
    const parts = payload.length === 0 ? [prefix] : [prefix, ...payload];
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i] as Uint8Array;
      const n = Math.min(free, p.length);
      if (n > 0) {
        const pos = w & this.mask;
        const first = Math.min(n, this.outData.length - pos);
        copyBytes(this.outData, pos, first === p.length ? p : p.subarray(0, first));
        if (n > first) copyBytes(this.outData, 0, p.subarray(first, n));
        w = (w + n) >>> 0;
        free -= n;
      }
      if (n < p.length) {
        rest = [p.subarray(n), ...parts.slice(i + 1)];
        break;
      }
    }
    this.writeIdx = w;
    Atomics.store(this.outCtl, W, w | 0);
    return rest;
  }

  private flush(): boolean {
    const [first, ...more] = this.backlog;
    if (first === undefined) return false;
    const before = this.writeIdx;
    this.backlog = this.write(first, more) ?? [];
    if (this.writeIdx !== before) this.ring();
    return this.writeIdx !== before;
  }

  /** Wakes the peer if it sleeps: it armed its doorbell, we disarm it and knock once. */
  private ring(): void {
    const b = this.bellCtl;
    if ((TSO ? b[SLEEPING] : Atomics.load(b, SLEEPING)) !== 0 && Atomics.exchange(b, SLEEPING, 0) !== 0)
      this.knock();
  }

  private knock(): void {
    const lib = this.fd >= 0 ? rawSocketLib() : null;
    // EAGAIN means unread knocks are queued: the peer wakes anyway
    if (lib !== null) lib.send(this.fd, KNOCK, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    else if (!this.socket.destroyed) this.socket.write(KNOCK);
  }

  private shut(reason: string, malformed: boolean): void {
    if (this.isClosed) return;
    this.isClosed = true;
    Atomics.store(this.outCtl, CLOSED, 1);
    this.ring();
    this.socket.destroy();
    this.onClose(this);
    // unmap later: we may be inside decoder.push() reading a view of the ring
    setImmediate(() => {
      this.mine.unmap();
      this.theirs.unmap();
      this.peerBell.unmap();
      this.peerKeys.unmap();
      for (const seg of this.peerRegions.values()) seg.unmap();
    });
    this.events?.closed(reason, malformed);
  }

  close(): void {
    this.shut('closed locally', false);
  }
}
