import { TandemError } from '../errors/index.js';
import { adviseHugePages } from './huge-pages.js';
import { wasmApi, type WasmMemory } from './wasm-api.js';

const PAGE = 65536;
/** A wasm32 memory holds at most 4 GiB (65536 pages). */
export const MAX_PAGES = 65536;
/** Bytes kept free at the bottom for the module's own static data. */
export const BASE = 1 << 20;
/**
 * The pool's claims counter: one i32 in the last cache line below BASE, which the kernels
 * module does not use. The native kernels' threads take their work from it (common.h TK_CLAIMS).
 */
export const CLAIMS_OFFSET = BASE - 64;
/** Grow in steps of at least this much to keep `memory.grow` calls rare. */
const GROW_STEP = 64 << 20;

/**
 * One shared WasmMemory used as a bump arena: weights and KV caches are allocated once;
 * a released block (a weight let go) is reused only by an allocation of its exact size, and
 * the rest stays until the Kernels instance closes; per-call scratch reuses one region that
 * is replaced by a bigger one when a call needs more.
 */
export class Arena {
  readonly memory: WasmMemory;
  private top = BASE;
  private u8View: Uint8Array;
  private f32View: Float32Array;
  private scratchPtr = 0;
  private scratchSize = 0;
  /**
   * Released blocks by their aligned size: an allocation of that size takes one before the
   * bump pointer moves (a released expert's room holds the next expert of its shape).
   */
  private readonly released = new Map<number, number[]>();

  constructor(
    readonly index: number,
    /** Bytes weights and caches may use in this arena; scratch may go beyond. */
    readonly capacity: number,
  ) {
    this.memory = new wasmApi.Memory({ initial: BASE / PAGE + 1, maximum: MAX_PAGES, shared: true });
    // a shared memory reserves its maximum up front and never moves: one advice covers it
    adviseHugePages(this.memory.buffer, MAX_PAGES * PAGE);
    this.u8View = new Uint8Array(this.memory.buffer);
    this.f32View = new Float32Array(this.memory.buffer);
  }

  get used(): number {
    return this.top;
  }

  get u8(): Uint8Array {
    if (this.u8View.length !== this.memory.buffer.byteLength) this.refresh();
    return this.u8View;
  }

  get f32(): Float32Array {
    if (this.f32View.length * 4 !== this.memory.buffer.byteLength) this.refresh();
    return this.f32View;
  }

  private refresh(): void {
    this.u8View = new Uint8Array(this.memory.buffer);
    this.f32View = new Float32Array(this.memory.buffer);
  }

  /** Whether `bytes` more of weights/caches fit under this arena's capacity. */
  fits(bytes: number): boolean {
    return align(this.top, 64) + bytes <= this.capacity;
  }

  /** Allocates `bytes` (64-byte aligned, zeroed); `limit` bounds the end address. */
  alloc(bytes: number, limit = this.capacity): number {
    const reuse = this.released.get(align(bytes, 64))?.pop();
    if (reuse !== undefined) {
      this.u8.fill(0, reuse, reuse + align(bytes, 64));
      return reuse;
    }
    const ptr = align(this.top, 64);
    const end = ptr + align(bytes, 64);
    if (end > limit) {
      throw new TandemError(
        'KERNELS_OUT_OF_MEMORY',
        `kernel arena ${this.index} cannot hold ${bytes} more bytes (${this.top} of ${limit} used)`,
        {
          hint: 'use a smaller model or context, or more nodes',
          details: { arena: this.index, bytes, used: this.top },
        },
      );
    }
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      const want = Math.min(MAX_PAGES * PAGE, Math.max(end, have + GROW_STEP));
      try {
        this.memory.grow(Math.ceil((want - have) / PAGE));
      } catch (cause) {
        throw new TandemError(
          'KERNELS_OUT_OF_MEMORY',
          `could not grow kernel arena ${this.index} to ${want} bytes`,
          {
            hint: 'free memory on this machine or use a smaller model',
            details: { arena: this.index, bytes: want },
            cause,
          },
        );
      }
      this.refresh();
    }
    this.top = end;
    return ptr;
  }

  /** Gives back a block from `alloc` (of `bytes`, as asked) for a later allocation of the same size. */
  release(ptr: number, bytes: number): void {
    const size = align(bytes, 64);
    const list = this.released.get(size);
    if (list) list.push(ptr);
    else this.released.set(size, [ptr]);
  }

  /** A scratch region of at least `bytes` (contents undefined); invalidated by the next call. */
  scratch(bytes: number): number {
    if (bytes > this.scratchSize) {
      const size = Math.max(align(bytes, 64), 2 * this.scratchSize, 1 << 20);
      this.scratchPtr = this.alloc(size, MAX_PAGES * PAGE - PAGE);
      this.scratchSize = size;
    }
    return this.scratchPtr;
  }
}

export function align(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}
