import { performance } from 'node:perf_hooks';
import type { Communicator } from '../collectives/communicator.js';
import { isTandemError, TandemError } from '../errors/index.js';
import {
  Access,
  completionError,
  openDevice,
  type CompletionQueue,
  type Device,
  type Listener,
  type MemoryRegion,
  type ProviderName,
  type QueuePair,
  type RemoteRegion,
} from '../fabric/index.js';
import { copyBytes } from '../kernels/copy.js';
import { bytesOf } from '../kernels/dtype.js';
import { f16ToF32Table, f32ToF16 } from '../kernels/half.js';
import { q8Bytes, q8Pack, q8Unpack } from '../kernels/q8.js';
import { flatTree, loadFastReduce, reduceFast, sumTree, treeSpares } from '../kernels/reduce-native.js';
import type { GroupSum } from '../engine/model/leaves.js';
import type { WireFormat } from './wire.js';

/**
 * The tensor-parallel group's hot path: every all-reduce of a decode step (two per layer) and
 * the vocabulary head's argmax exchange. Each rank writes its whole part straight into a
 * registered inbox on every peer (one RDMA write with immediate per peer, no router, no
 * per-call allocation), then sums every rank's part in the fixed tree (sumTree): the
 * same additions in the same order on every rank, so the results are bit-identical everywhere,
 * and the order one node adds its leaves in, so 2 and 4 ranks give one node's sums.
 *
 * With `f16` or `q8` every part (the rank's own included) is rounded once, by its owner, and
 * every rank sums the same rounded parts: there is no re-quantisation of partial sums and the
 * ranks never disagree. A mesh costs (size - 1) x the vector per rank, the right trade for
 * the few nodes and small vectors (a hidden state: 8 KiB) of a decode step.
 *
 * Inboxes hold two slots per peer: a peer can be at most one exchange ahead (it cannot finish
 * exchange k + 1 before this rank's part of k + 1 arrives), so slot k % 2 is free again when
 * exchange k + 2 starts.
 */

/** Elements per exchange; longer vectors (prefill: [tokens, width]) go in several. */
const DEFAULT_CHUNK = 1 << 19;
const RECVS_PER_PEER = 4;

/**
 * Whether tensor-parallel groups on this provider get the direct exchange: over shm only.
 * Over tcp the communicator decoded faster (TinyLlama tp, 2 nodes: 1.65-1.69x against
 * 1.09-1.33x through the exchange; prefill the other way round, docs/parallel.md).
 */
export function usesDirectExchange(provider: ProviderName): boolean {
  return provider === 'shm';
}

/** One exchange slot: the largest payload plus 64 bytes (room for the profiling timestamp, see TANDEM_TP_PROFILE). */
function exchangeSlotBytes(chunk: number): number {
  return Math.ceil((4 * chunk) / 64) * 64 + 64;
}

/** Bytes an exchange registers on each member of a group of `size`: two outbox slots and two inbox slots per peer. */
export function exchangeBufferBytes(size: number, chunk = DEFAULT_CHUNK): number {
  return size > 1 ? 2 * size * exchangeSlotBytes(chunk) : 0;
}
const profiling = process.env.TANDEM_TP_PROFILE === '1';
const profileEvery = Number(process.env.TANDEM_TP_PROFILE_EVERY ?? 1000) || 1000;

interface Peer {
  rank: number;
  qp: QueuePair;
  remote: RemoteRegion;
  inbox: MemoryRegion;
}

export interface TpExchangeOptions {
  /** The tensor-parallel group (its collectives are used only to set up the exchange). */
  group: Communicator;
  provider: ProviderName;
  /** This rank's fabric host (where peers can reach it). */
  host: string;
  secret: string;
  wire?: WireFormat;
  /** Deadline of every wait (default 30000 ms). */
  timeoutMs?: number;
  /** Largest elements per single exchange (default 512 Ki). */
  chunk?: number;
  /**
   * How the waits for the peers' parts busy-poll (the fabric's WaitOptions.spin): default
   * adaptive. A peer's part comes when it has computed its half of a layer, often later than
   * the adaptive window (200 us at most), and a sleeping wait costs a wake-up of 100-300 us;
   * when every rank has a core of its own, spinning through the compute is free.
   */
  spin?: boolean | number;
}

/** Encodes an IPv4/hostname string as ints for a gather (hosts are short). */
const HOST_WORDS = 64;
function hostWords(host: string): Int32Array {
  const out = new Int32Array(HOST_WORDS);
  const bytes = Buffer.from(host, 'utf8');
  if (bytes.length >= HOST_WORDS)
    throw new TandemError('PAR_EXCHANGE', `fabric host '${host}' is longer than ${HOST_WORDS - 1} bytes`, {
      hint: 'use an IP address for the node',
    });
  for (let i = 0; i < bytes.length; i++) out[i] = bytes[i] as number;
  return out;
}
function wordsHost(words: Int32Array): string {
  const bytes: number[] = [];
  for (const w of words) {
    if (w === 0) break;
    bytes.push(w);
  }
  return Buffer.from(bytes).toString('utf8');
}

export class TpExchange {
  /** Milliseconds spent waiting for the peers' parts (summed over calls). */
  waitMs = 0;
  calls = 0;
  private seq = 0;
  private readonly arrived = [0, 0];
  private readonly outViews: { f32: Float32Array; u16: Uint16Array; u8: Uint8Array }[];
  private readonly inViews: { f32: Float32Array; u16: Uint16Array; u8: Uint8Array }[][];
  private readonly own: Float32Array;
  /** Each peer's part decoded from f16/q8 (unused for f32, whose parts are read in place). */
  private readonly decoded: Float32Array[];
  /** sumTree's spare buffers (grown to what a group's tree needs). */
  private readonly spare: Float32Array[];
  private readonly parts: Float32Array[] = [];
  /** A chunk's runs of this rank's pieces, and of their carried errors (group sums; allocated on first use). */
  private packedRuns: Float32Array | undefined;
  private packedErrors: Float32Array | undefined;
  private aborted: string | undefined;

  private constructor(
    readonly rank: number,
    readonly size: number,
    private readonly device: Device,
    private readonly listener: Listener,
    private readonly cq: CompletionQueue,
    private readonly outbox: MemoryRegion,
    private readonly peers: (Peer | undefined)[],
    private readonly slotBytes: number,
    readonly chunk: number,
    readonly wire: WireFormat,
    private readonly timeoutMs: number,
    private readonly spin: boolean | number,
  ) {
    const view = (buf: Uint8Array, off: number): { f32: Float32Array; u16: Uint16Array; u8: Uint8Array } => ({
      f32: new Float32Array(buf.buffer, buf.byteOffset + off, chunk),
      u16: new Uint16Array(buf.buffer, buf.byteOffset + off, chunk),
      u8: new Uint8Array(buf.buffer, buf.byteOffset + off, slotBytes),
    });
    this.outViews = [view(outbox.buffer, 0), view(outbox.buffer, slotBytes)];
    this.inViews = peers.map((p) => (p ? [view(p.inbox.buffer, 0), view(p.inbox.buffer, slotBytes)] : []));
    this.own = new Float32Array(chunk);
    this.decoded = peers.map((p) => (p && wire !== 'f32' ? new Float32Array(chunk) : new Float32Array(0)));
    this.spare = Array.from({ length: treeSpares(flatTree(size)) }, () => new Float32Array(chunk));
  }

  /** Collective over `group`: every member listens, learns the others' addresses and connects to each. */
  static async connect(o: TpExchangeOptions): Promise<TpExchange> {
    const { group } = o;
    const chunk = o.chunk ?? DEFAULT_CHUNK;
    const wire = o.wire ?? 'f32';
    const timeoutMs = o.timeoutMs ?? 30_000;
    const slotBytes = exchangeSlotBytes(chunk);
    await loadFastReduce();
    const device = await openDevice(o.provider);
    let listener: Listener | undefined;
    const qps: QueuePair[] = [];
    try {
      listener = await device.listen({ host: o.host, port: 0, secret: o.secret });
      const mine = new Int32Array(HOST_WORDS + 1);
      mine.set(hostWords(o.host));
      mine[HOST_WORDS] = listener.port;
      const all = (await group.allGather(mine)) as Int32Array;
      const pd = device.allocPd();
      const cq = device.createCq({ depth: 4096 });
      const outbox = pd.allocate(2 * slotBytes, Access.LOCAL_WRITE);
      const peers: (Peer | undefined)[] = Array.from({ length: group.size });
      // One inbox per connection, described to the peer in the connection's info.
      const prepare = (): { inbox: MemoryRegion; info: Record<string, unknown> } => {
        const inbox = pd.allocate(2 * slotBytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
        return {
          inbox,
          info: {
            rank: group.rank,
            region: { addr: String(inbox.addr), rkey: inbox.rkey, length: inbox.length },
          },
        };
      };
      const adopt = (qp: QueuePair, inbox: MemoryRegion): void => {
        qps.push(qp);
        const peer = qp.peerInfo.rank;
        const r = qp.peerInfo.region as { addr?: unknown; rkey?: unknown; length?: unknown } | undefined;
        if (
          typeof peer !== 'number' ||
          !Number.isInteger(peer) ||
          peer < 0 ||
          peer >= group.size ||
          peer === group.rank ||
          peers[peer] !== undefined ||
          typeof r?.addr !== 'string' ||
          !/^\d+$/.test(r.addr) ||
          typeof r.rkey !== 'number' ||
          typeof r.length !== 'number' ||
          r.length < 2 * slotBytes
        )
          throw new TandemError(
            'PAR_EXCHANGE',
            `rank ${group.rank}: a peer introduced itself as rank ${String(peer)} with an unusable inbox`,
            { hint: 'run the same tandem version on every node (and one run per set of nodes)' },
          );
        peers[peer] = {
          rank: peer,
          qp,
          remote: { addr: BigInt(r.addr), rkey: r.rkey, length: r.length },
          inbox,
        };
        for (let i = 0; i < RECVS_PER_PEER; i++) qp.postRecv({ wrId: peer, sgl: [] });
      };
      const work: Promise<void>[] = [];
      for (let p = 0; p < group.size; p++) {
        if (p === group.rank) continue;
        const { inbox, info } = prepare();
        if (p < group.rank) {
          const at = all.subarray(p * (HOST_WORDS + 1), (p + 1) * (HOST_WORDS + 1));
          const host = wordsHost(at.subarray(0, HOST_WORDS));
          const port = at[HOST_WORDS] as number;
          work.push(
            device
              .connect({ host, port, secret: o.secret, pd, cq, info, timeoutMs, opTimeoutMs: timeoutMs })
              .then((qp) => adopt(qp, inbox)),
          );
        } else {
          // Higher ranks connect to us, in any order; their info says who they are.
          work.push(
            listener
              .accept({ pd, cq, info, timeoutMs, opTimeoutMs: timeoutMs })
              .then((qp) => adopt(qp, inbox)),
          );
        }
      }
      await Promise.all(work);
      return new TpExchange(
        group.rank,
        group.size,
        device,
        listener,
        cq,
        outbox,
        peers,
        slotBytes,
        chunk,
        wire,
        timeoutMs,
        o.spin ?? true,
      );
    } catch (e) {
      for (const qp of qps) await qp.close().catch(() => undefined);
      await listener?.close().catch(() => undefined);
      await device.close().catch(() => undefined);
      throw e;
    }
  }

  /** Bytes one rank sends to each peer for `count` values in this exchange's wire format. */
  payloadBytes(count: number, wire: WireFormat = this.wire): number {
    return wire === 'f32' ? 4 * count : wire === 'f16' ? 2 * count : q8Bytes(count);
  }

  /**
   * In place: x becomes the sum over the group (every part rounded to the wire format first).
   * With `group` (exact row-parallel sums, leaves.ts), x holds this rank's pieces [pieces, m]
   * and x[0, m) becomes the sum of every rank's pieces in the order of `group.tree`.
   * With `carry` (same length as x; f16/q8 wires): error feedback. This rank's rounding error
   * of the previous call is added to its part before rounding, and `carry` receives the new
   * error. For the all-reduces of one forward pass, which all add into the same residual
   * stream, the rounding errors then no longer pile up layer after layer: the stream misses
   * only the last call's error, not the sum of every call's.
   */
  async allReduceSum(x: Float32Array, carry?: Float32Array, group?: GroupSum): Promise<void> {
    const feedback = carry !== undefined && this.wire !== 'f32';
    const counts = group?.counts;
    const pieces = counts ? counts[this.rank]! : 1;
    const m = x.length / pieces;
    // a chunk carries every piece's run [at, at + step) of every rank
    const step = counts ? Math.floor(this.chunk / Math.max(...counts)) : this.chunk;
    for (let at = 0; at < m; at += step) {
      const len = Math.min(m - at, step);
      let part = x.subarray(at, at + len);
      if (pieces > 1) {
        part = (this.packedRuns ??= new Float32Array(this.chunk)).subarray(0, pieces * len);
        for (let q = 0; q < pieces; q++) part.set(x.subarray(q * m + at, q * m + at + len), q * len);
      }
      const c = feedback ? this.carryRun(carry, m, at, len, pieces) : undefined;
      if (c) for (let i = 0; i < part.length; i++) part[i] = (part[i] as number) + (c[i] as number);
      await this.exchange(part, this.wire);
      this.sum(part, len, this.wire, c, group);
      if (pieces > 1) {
        x.set(part.subarray(0, len), at);
        if (c) this.unpackCarry(c, carry!, m, at, len, pieces);
      }
    }
  }

  /** The carried errors of a chunk's runs, packed like the chunk (the carry itself for one piece). */
  private carryRun(carry: Float32Array, m: number, at: number, len: number, pieces: number): Float32Array {
    if (pieces === 1) return carry.subarray(at, at + len);
    const c = (this.packedErrors ??= new Float32Array(this.chunk)).subarray(0, pieces * len);
    for (let q = 0; q < pieces; q++) c.set(carry.subarray(q * m + at, q * m + at + len), q * len);
    return c;
  }

  private unpackCarry(
    c: Float32Array,
    carry: Float32Array,
    m: number,
    at: number,
    len: number,
    pieces: number,
  ): void {
    for (let q = 0; q < pieces; q++) carry.set(c.subarray(q * len, (q + 1) * len), q * m + at);
  }

  /** Every rank's `mine` (same length on all, f32 exact) into `out` [size, mine.length] in rank order. */
  async allGather(mine: Float32Array, out: Float32Array): Promise<void> {
    const n = mine.length;
    if (n > this.chunk)
      throw new TandemError(
        'PAR_EXCHANGE',
        `an exchange gather of ${n} values exceeds the chunk of ${this.chunk}`,
        {
          hint: 'gather through the communicator instead',
        },
      );
    await this.exchange(mine, 'f32');
    const slot = (this.seq - 1) & 1;
    for (let r = 0; r < this.size; r++) {
      const src = r === this.rank ? mine : (this.inViews[r]![slot]!.f32.subarray(0, n) as Float32Array);
      copyBytes(bytesOf(out), r * n * 4, bytesOf(src));
    }
  }

  /** Sends this rank's part of exchange `seq` to every peer and waits for theirs. */
  private async exchange(x: Float32Array, wire: WireFormat): Promise<void> {
    if (this.aborted !== undefined)
      throw new TandemError(
        'PAR_EXCHANGE',
        `rank ${this.rank}: the tensor-parallel exchange is closed (${this.aborted})`,
        {
          hint: 'load the model again',
        },
      );
    const seq = this.seq++;
    const slot = seq & 1;
    const n = x.length;
    const out = this.outViews[slot]!;
    if (wire === 'f32') copyBytes(out.u8, 0, bytesOf(x));
    else if (wire === 'f16') for (let i = 0; i < n; i++) out.u16[i] = f32ToF16(x[i] as number);
    else q8Pack(x, out.u8.subarray(0, q8Bytes(n)));
    let bytes = this.payloadBytes(n, wire);
    const sentAt = performance.timeOrigin + performance.now();
    if (profiling) {
      // Profiling: the send time travels after the payload, so the receiver can tell waiting
      // for a late peer from transfer and wake-up time.
      const at = Math.ceil(bytes / 8) * 8;
      new DataView(out.u8.buffer, out.u8.byteOffset + at, 8).setFloat64(0, sentAt, true);
      bytes = at + 8;
    }
    const imm = seq >>> 0;
    for (const p of this.peers) {
      if (!p) continue;
      p.qp.postSend({
        wrId: seq,
        opcode: 'write_imm',
        imm,
        sgl: [this.outbox.sge(slot * this.slotBytes, bytes)],
        remote: { addr: p.remote.addr + BigInt(slot * this.slotBytes), rkey: p.remote.rkey },
        signaled: false,
      });
    }
    const t0 = performance.now();
    try {
      while (this.arrived[slot]! < this.size - 1) {
        for (const wc of await this.cq.wait({ timeoutMs: this.timeoutMs, spin: this.spin })) {
          if (wc.status !== 'success') throw completionError(wc);
          if (wc.opcode !== 'recv_imm') continue;
          const from = wc.wrId;
          this.peers[from]!.qp.postRecv({ wrId: from, sgl: [] });
          const got = wc.imm ?? -1;
          if (got !== imm && got !== (seq + 1) >>> 0)
            throw new TandemError(
              'PAR_EXCHANGE',
              `rank ${this.rank}: exchange ${seq} got part ${got} from rank ${from}`,
              {
                hint: 'every rank of a tensor-parallel group must run the same exchanges in the same order',
              },
            );
          this.arrived[got & 1]!++;
        }
      }
    } catch (e) {
      throw this.failed(e);
    } finally {
      this.waitMs += performance.now() - t0;
      this.calls++;
    }
    this.arrived[slot] = 0;
    if (profiling) this.profile(slot, sentAt, Math.ceil(this.payloadBytes(n, wire) / 8) * 8);
  }

  private prof = { calls: 0, wait: 0, late: 0, since: 0 };

  /** TANDEM_TP_PROFILE=1: every 1000 exchanges, one stderr line splitting the wait. */
  private profile(slot: number, sentAt: number, at: number): void {
    const done = performance.timeOrigin + performance.now();
    let lastPeer = sentAt;
    for (let r = 0; r < this.size; r++) {
      if (r === this.rank) continue;
      const u8 = this.inViews[r]![slot]!.u8;
      lastPeer = Math.max(lastPeer, new DataView(u8.buffer, u8.byteOffset + at, 8).getFloat64(0, true));
    }
    const p = this.prof;
    if (p.calls === 0) p.since = sentAt;
    p.calls++;
    p.wait += done - sentAt;
    p.late += lastPeer - sentAt;
    if (p.calls === profileEvery) {
      const wall = done - p.since;
      process.stderr.write(
        `tp-exchange rank ${this.rank}/${this.size}: ${p.calls} exchanges in ${wall.toFixed(1)} ms: ` +
          `waiting ${p.wait.toFixed(1)} ms (for the slower rank ${p.late.toFixed(1)} ms, ` +
          `transfer and wake-up ${(p.wait - p.late).toFixed(1)} ms), the rest ${(wall - p.wait).toFixed(1)} ms\n`,
      );
      this.prof = { calls: 0, wait: 0, late: 0, since: 0 };
    }
  }

  /**
   * x[0, len) = the sum of every rank's part (own part rounded like the others) in the fixed
   * tree: group.tree over every rank's pieces, else the flat pairwise tree over the ranks
   * ((p0 + p1) + (p2 + p3) for 4). That is the order one node adds its leaves in, so a split
   * into 2, 3 or 4 gives one node's sums bit for bit (docs/parallel.md, "Exact tensor
   * parallel"). x holds this rank's part [pieces, len]. The adds run in the native reduce
   * kernel (a 1 MiB part: ~0.5 ms in a TypeScript loop). With 2 ranks of one piece each and
   * the exact f32 wire, x already holds this rank's part and the other's is added to it in
   * place: p1 + p0 is bit for bit p0 + p1 (IEEE addition commutes).
   */
  private sum(
    x: Float32Array,
    len: number,
    wire: WireFormat,
    carry: Float32Array | undefined,
    group: GroupSum | undefined,
  ): void {
    const slot = (this.seq - 1) & 1;
    const counts = group?.counts;
    if (wire === 'f32' && this.size === 2 && (!counts || (counts[0] === 1 && counts[1] === 1))) {
      reduceFast('sum', 'f32', x, this.inViews[1 - this.rank]![slot]!.f32.subarray(0, len));
      return;
    }
    const n = x.length;
    const own = this.own.subarray(0, n);
    this.decode(this.outViews[slot]!, own, x, wire);
    if (carry) for (let i = 0; i < n; i++) carry[i] = (x[i] as number) - (own[i] as number);
    const parts = this.parts;
    parts.length = 0;
    for (let r = 0; r < this.size; r++) {
      const count = counts ? counts[r]! : 1;
      const view = this.inViews[r]![slot];
      const values =
        r === this.rank
          ? own
          : wire === 'f32'
            ? view!.f32.subarray(0, count * len)
            : this.decode(view!, this.decoded[r]!.subarray(0, count * len), undefined, wire);
      for (let q = 0; q < count; q++) parts.push(values.subarray(q * len, (q + 1) * len));
    }
    const tree = group?.tree ?? flatTree(this.size);
    const spares = treeSpares(tree);
    while (this.spare.length < spares) this.spare.push(new Float32Array(this.chunk));
    sumTree(tree, parts, x.subarray(0, len), this.spare);
  }

  private decode(
    v: { f32: Float32Array; u16: Uint16Array; u8: Uint8Array },
    into: Float32Array,
    exact: Float32Array | undefined,
    wire: WireFormat,
  ): Float32Array {
    const n = into.length;
    if (wire === 'f32') {
      if (exact) into.set(exact);
      else return v.f32.subarray(0, n);
    } else if (wire === 'f16')
      for (let i = 0; i < n; i++) into[i] = f16ToF32Table[v.u16[i] as number] as number;
    else q8Unpack(v.u8.subarray(0, q8Bytes(n)), into);
    return into;
  }

  private failed(e: unknown): TandemError {
    if (isTandemError(e) && e.code === 'PAR_EXCHANGE') return e;
    const cause = e as Error;
    const lost =
      isTandemError(e) && ['FABRIC_WORK_FAILED', 'FABRIC_WAIT_TIMEOUT', 'ABORTED'].includes(e.code);
    return new TandemError(
      lost ? 'PAR_PEER_LOST' : 'PAR_EXCHANGE',
      `rank ${this.rank} of a ${this.size}-rank tensor-parallel group: exchange ${this.seq - 1} failed: ${cause.message}`,
      { hint: 'a node of the group stopped or is unreachable: check the nodes and run again', cause: e },
    );
  }

  /** Bytes of the outbox and inboxes (what `exchangeBufferBytes` predicts). */
  get bufferBytes(): number {
    return this.peers.reduce((sum, p) => sum + (p ? p.inbox.length : 0), this.outbox.length);
  }

  /** Ends every wait at once (a peer was lost elsewhere). */
  abort(reason: string): void {
    this.aborted ??= reason;
    this.cq.abort(reason);
  }

  async close(): Promise<void> {
    this.aborted ??= 'closed';
    for (const p of this.peers) if (p) await p.qp.close().catch(() => undefined);
    await this.listener.close().catch(() => undefined);
    await this.device.close().catch(() => undefined);
  }
}
