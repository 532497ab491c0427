import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { TandemError } from '../errors/index.js';
import { wasmApi, type WasmMemory, type WasmModule } from './wasm-api.js';
import type { NativeLib } from './native-lib.js';
import { CLAIMS_OFFSET } from './wasm-arena.js';
import { GEMM_TOKENS } from './types.js';

/**
 * `threads` compute threads over shared WebAssembly memories: the caller's thread plus
 * threads - 1 workers (pool-worker.js). A job is one exported kernel called on every thread
 * with the same arguments plus (tid, nt); each kernel computes its own share from tid, or (the
 * native matmuls) its threads take chunks from the arena's claims counter, zeroed per job.
 *
 * Control words (Int32 on a SharedArrayBuffer): SEQ job sequence, DONE workers finished,
 * OP export index (-1 quit), ARENA memory index, ARGC argument count, ERROR failing tid;
 * arguments as float64 from byte 64 (exact for i32 and f32 values).
 * Waiting spins `spin` times, then sleeps (Atomics.wait): with more threads than cores a
 * long spin steals the core from the thread being waited for.
 */
const SEQ = 0;
const DONE = 1;
const OP = 2;
const ARENA = 3;
const ARGC = 4;
const ERROR = 5;
const QUIT = -1;

/**
 * Jobs below this many multiply-adds run on the calling thread alone: waking the workers
 * costs more than it saves (microseconds on an idle machine, far more on a busy one).
 */
export const SMALL_JOB = 65536;

/** Longest a job may take before the pool declares a worker lost. */
const JOB_TIMEOUT_MS = 120_000;

type KernelFn = (...args: number[]) => void;

export class ThreadPool {
  private readonly ctrl: Int32Array;
  private readonly args: Float64Array;
  private readonly ports: MessagePort[] = [];
  private readonly workers: Worker[] = [];
  private readonly mainFns: KernelFn[][] = [];
  /** Each arena's claims counter (CLAIMS_OFFSET), zeroed before every job on several threads. */
  private readonly claims: Int32Array[] = [];
  private closed = false;
  private native: { addr: (p: Uint8Array) => number; fns: Record<string, KernelFn> } | undefined;
  /** Jobs below this many multiply-adds stay on the calling thread (see SMALL_JOB). */
  smallJob = SMALL_JOB;

  private constructor(
    private readonly module: WasmModule,
    readonly threads: number,
    private readonly names: readonly string[],
    private readonly spin: number,
  ) {
    const control = new SharedArrayBuffer(64 + 32 * 8);
    this.ctrl = new Int32Array(control, 0, 16);
    this.args = new Float64Array(control, 64, 32);
  }

  /**
   * `native` (optional): a compiled C library whose functions replace the wasm exports of
   * the same name; each takes the memory's address first (see native-lib.ts).
   */
  static async create(
    module: WasmModule,
    threads: number,
    names: readonly string[],
    native?: NativeLib,
    spin = Number(process.env.TANDEM_KERNELS_SPIN ?? 20000),
  ): Promise<ThreadPool> {
    const pool = new ThreadPool(module, threads, names, spin);
    if (native) {
      const { default: koffi } = await import('koffi');
      const lib = koffi.load(native.path);
      const fns: Record<string, KernelFn> = {};
      for (const [name, proto] of Object.entries(native.prototypes)) fns[name] = lib.func(proto) as KernelFn;
      const claimsAt = (lib.func('int tk_claims_offset(void)') as () => number)();
      if (claimsAt !== CLAIMS_OFFSET)
        throw new TandemError(
          'INTERNAL',
          `the native kernels count claims at byte ${claimsAt} of a memory, the pool zeroes byte ${CLAIMS_OFFSET}`,
          { hint: 'rebuild the native kernels (node bin/build.js); common.h and wasm-arena.ts must agree' },
        );
      const gemmAt = (lib.func('int tk_gemm_tokens(void)') as () => number)();
      if (gemmAt !== GEMM_TOKENS)
        throw new TandemError(
          'INTERNAL',
          `the native kernels take a GEMM from ${gemmAt} tokens, types.ts GEMM_TOKENS is ${GEMM_TOKENS}`,
          { hint: 'rebuild the native kernels (node bin/build.js); common.h and types.ts must agree' },
        );
      pool.native = { addr: lib.func('uintptr_t tk_addr(uint8_t *p)') as (p: Uint8Array) => number, fns };
    }
    const started: Promise<void>[] = [];
    for (let tid = 1; tid < threads; tid++) {
      const { port1, port2 } = new MessageChannel();
      const worker = new Worker(new URL('./pool-worker.js', import.meta.url), {
        workerData: { module, control: pool.ctrl.buffer, port: port2, tid, nt: threads, names, spin, native },
        transferList: [port2],
      });
      pool.workers.push(worker);
      pool.ports.push(port1);
      started.push(
        new Promise((resolve, reject) => {
          worker.once('online', () => resolve());
          worker.once('error', reject);
        }),
      );
    }
    await Promise.all(started);
    // Idle workers must not keep the process alive; close() still ends them cleanly.
    for (const w of pool.workers) w.unref();
    for (const p of pool.ports) p.unref();
    return pool;
  }

  /** Whether the native library runs kernel `name` (a native-only kernel has no wasm export). */
  runsNative(name: string): boolean {
    return this.native?.fns[name] !== undefined;
  }

  /**
   * The address of `view`'s first byte, for a native kernel that reaches memory outside the
   * arenas (copy_rows); undefined without the native library. A JavaScript array's backing
   * store does not move while the array lives, and the caller holds it through the run.
   */
  address(view: ArrayBufferView): number | undefined {
    return this.native?.addr(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
  }

  /** Registers a memory (arena index = registration order) and returns the caller's kernels on it. */
  addMemory(memory: WasmMemory): Record<string, KernelFn> {
    const instance = new wasmApi.Instance(this.module, { env: { memory } });
    const exports = instance.exports as Record<string, KernelFn>;
    const native = this.native;
    // A shared memory never moves (its maximum is reserved up front), so its address is fixed.
    const base = native ? native.addr(new Uint8Array(memory.buffer)) : 0;
    this.claims.push(new Int32Array(memory.buffer, CLAIMS_OFFSET, 1));
    this.mainFns.push(
      this.names.map((n) => {
        const f = native?.fns[n];
        return f ? (...a: number[]) => f(base, ...a) : (exports[n] as KernelFn);
      }),
    );
    for (const port of this.ports) port.postMessage({ memory });
    return exports;
  }

  /**
   * Runs kernel `op` (index into names) on arena `arena` on every thread; returns when all
   * finished. `work` (multiply-adds, roughly) below SMALL_JOB keeps it on this thread.
   */
  run(arena: number, op: number, args: readonly number[], work = Infinity): void {
    if (this.closed)
      throw new TandemError('KERNELS_CLOSED', 'the kernels thread pool is closed', {
        hint: 'create a new Kernels instance',
      });
    const fn = (this.mainFns[arena] as KernelFn[])[op] as KernelFn;
    const nt = this.threads;
    if (nt === 1 || work < this.smallJob) {
      fn(...args, 0, 1);
      return;
    }
    const ctrl = this.ctrl;
    for (let i = 0; i < args.length; i++) this.args[i] = args[i] as number;
    ctrl[OP] = op;
    ctrl[ARENA] = arena;
    ctrl[ARGC] = args.length;
    Atomics.store(this.claims[arena] as Int32Array, 0, 0);
    Atomics.store(ctrl, DONE, 0);
    Atomics.add(ctrl, SEQ, 1);
    Atomics.notify(ctrl, SEQ);
    fn(...args, 0, nt);
    this.waitDone(nt - 1);
    if (Atomics.load(ctrl, ERROR) !== 0) this.fail();
  }

  private waitDone(target: number): void {
    const ctrl = this.ctrl;
    let spins = 0;
    let done = Atomics.load(ctrl, DONE);
    const start = Date.now();
    while (done !== target) {
      if (++spins > this.spin) {
        Atomics.wait(ctrl, DONE, done, 50);
        if (Date.now() - start > JOB_TIMEOUT_MS) {
          throw new TandemError(
            'KERNELS_WORKER_FAILED',
            `kernel workers did not finish a job within ${JOB_TIMEOUT_MS} ms (${done} of ${target} done)`,
            {
              hint: 'a worker thread died or the machine is overloaded; restart the process',
            },
          );
        }
      }
      done = Atomics.load(ctrl, DONE);
    }
  }

  private fail(): never {
    const tid = Atomics.load(this.ctrl, ERROR);
    const msg = receiveMessageOnPort(this.ports[tid - 1] as MessagePort)?.message as
      { message?: string } | undefined;
    Atomics.store(this.ctrl, ERROR, 0);
    throw new TandemError(
      'KERNELS_WORKER_FAILED',
      `kernel worker ${tid} failed: ${msg?.message ?? 'unknown error'}`,
      {
        hint: 'this is a bug in the kernels; report it with the model and command',
      },
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.workers.length === 0) return;
    this.ctrl[OP] = QUIT;
    Atomics.add(this.ctrl, SEQ, 1);
    Atomics.notify(this.ctrl, SEQ);
    await Promise.all(
      this.workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(() => void w.terminate().then(() => resolve()), 2000);
            w.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
          }),
      ),
    );
    for (const p of this.ports) p.close();
  }
}
