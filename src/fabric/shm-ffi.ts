import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { TandemError } from '../errors/index.js';

/**
 * POSIX shared memory through koffi: shm_open + ftruncate + mmap, viewed as an ArrayBuffer on
 * which Atomics work across processes, and the futex syscall to sleep and wake (Atomics.wait
 * does not work on a non-shared ArrayBuffer). Linux x86_64/arm64 only.
 */
interface Libc {
  shm_open(name: string, oflag: number, mode: number): number;
  shm_unlink(name: string): number;
  ftruncate(fd: number, len: number): number;
  mmap(addr: null, len: number, prot: number, flags: number, fd: number, off: number): bigint;
  munmap(addr: bigint, len: number): number;
  close(fd: number): number;
  futex(
    nr: number,
    addr: bigint,
    op: number,
    val: number,
    ts: Buffer | null,
    addr2: null,
    val3: number,
  ): number;
  view(ptr: bigint, len: number): ArrayBuffer;
}

const O_RDWR = 2;
const O_CREAT = 0o100;
const O_EXCL = 0o200;
const PROT_RW = 3;
const MAP_SHARED = 1;
const MAP_FAILED = (1n << 64n) - 1n;
const FUTEX_WAIT = 0;
const FUTEX_WAKE = 1;
const SYS_FUTEX = process.arch === 'arm64' ? 98 : 202;

let libc: Libc | undefined;
let loadError: string | undefined;

/** Loads libc through koffi once; undefined with a reason when that is impossible here. */
export function loadLibc(): Libc | undefined {
  if (libc || loadError) return libc;
  if (process.platform !== 'linux') {
    loadError = `shm needs Linux (this is ${process.platform})`;
    return undefined;
  }
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const lib = koffi.load('libc.so.6');
    const f = {
      shm_open: lib.func('int shm_open(const char *name, int oflag, uint32_t mode)'),
      shm_unlink: lib.func('int shm_unlink(const char *name)'),
      ftruncate: lib.func('int ftruncate(int fd, int64_t len)'),
      mmap: lib.func('void *mmap(void *addr, size_t len, int prot, int flags, int fd, int64_t off)'),
      munmap: lib.func('int munmap(void *addr, size_t len)'),
      close: lib.func('int close(int fd)'),
      futex: lib.func('long syscall(long nr, void *addr, int op, int val, void *ts, void *addr2, int val3)'),
    };
    libc = { ...f, view: (ptr, len) => koffi.view(ptr, len) } as Libc;
  } catch (e) {
    loadError = `koffi could not load libc: ${(e as Error).message}`;
  }
  return libc;
}

export function libcProblem(): string | undefined {
  loadLibc();
  return loadError;
}

function need(): Libc {
  const c = loadLibc();
  if (!c)
    throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `shm provider unavailable: ${loadError}`, {
      hint: 'use the tcp provider on this machine',
    });
  return c;
}

/** Every segment this process created and has not unlinked yet: removed on exit. */
const owned = new Set<string>();
let exitHook = false;

function unlinkOwnedOnExit(): void {
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    const c = libc;
    if (c) for (const name of owned) c.shm_unlink(name);
  });
}

/** A mapped POSIX shared-memory segment. */
export class ShmSegment {
  readonly buffer: ArrayBuffer;
  readonly ptr: bigint;
  private mapped = true;

  private constructor(
    readonly name: string,
    readonly length: number,
    ptr: bigint,
    private owner: boolean,
  ) {
    this.ptr = ptr;
    this.buffer = need().view(ptr, length);
  }

  /** Creates a new segment (name must not exist) and maps it. */
  static create(name: string, length: number): ShmSegment {
    const c = need();
    const fd = c.shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0o600);
    if (fd < 0) throw shmError(`shm_open(${name}) failed`);
    owned.add(name);
    unlinkOwnedOnExit();
    try {
      if (c.ftruncate(fd, length) !== 0)
        throw shmError(`ftruncate(${name}, ${length}) failed (is /dev/shm full?)`);
      const ptr = c.mmap(null, length, PROT_RW, MAP_SHARED, fd, 0);
      if (ptr === MAP_FAILED || ptr === 0n) throw shmError(`mmap of ${name} (${length} bytes) failed`);
      return new ShmSegment(name, length, ptr, true);
    } catch (e) {
      c.shm_unlink(name);
      owned.delete(name);
      throw e;
    } finally {
      c.close(fd);
    }
  }

  /** Maps a segment another process created. */
  static open(name: string, length: number): ShmSegment {
    const c = need();
    if (!/^\/tandem-[0-9]+-[0-9a-f]+(-[a-z]+)?$/.test(name))
      throw shmError(`refusing to map '${name}': not a tandem segment name`);
    const fd = c.shm_open(name, O_RDWR, 0);
    if (fd < 0) throw shmError(`shm_open(${name}) failed: the peer's segment is gone`);
    try {
      const ptr = c.mmap(null, length, PROT_RW, MAP_SHARED, fd, 0);
      if (ptr === MAP_FAILED || ptr === 0n) throw shmError(`mmap of ${name} failed`);
      return new ShmSegment(name, length, ptr, false);
    } finally {
      c.close(fd);
    }
  }

  /** Removes the name (the mappings stay valid). Safe to call more than once. */
  unlink(): void {
    need().shm_unlink(this.name);
    owned.delete(this.name);
    this.owner = false;
  }

  /**
   * For memory handed to users: unlinks now, unmaps only once `view`'s buffer is garbage
   * collected (an unmapped view would crash the process on access).
   */
  releaseWhenUnreachable(view: Uint8Array): void {
    if (this.owner) this.unlink();
    this.mapped = false;
    unmapper.register(view.buffer, { ptr: this.ptr, length: this.length });
  }

  unmap(): void {
    if (!this.mapped) return;
    this.mapped = false;
    if (this.owner) this.unlink();
    need().munmap(this.ptr, this.length);
  }
}

const unmapper = new FinalizationRegistry<{ ptr: bigint; length: number }>((m) => {
  loadLibc()?.munmap(m.ptr, m.length);
});

function shmError(message: string): TandemError {
  return new TandemError('FABRIC_SHM_FAILED', message, {
    hint: 'check /dev/shm (mounted, writable, free space) or use the tcp provider',
  });
}

const timespec = Buffer.alloc(16);

/** Sleeps while the i32 at byte `offset` of `seg` equals `expected`, at most `ms`. */
export function futexWait(seg: ShmSegment, offset: number, expected: number, ms: number): void {
  const ns = Math.max(0, Math.floor(ms * 1e6));
  timespec.writeBigInt64LE(BigInt(Math.floor(ns / 1e9)), 0);
  timespec.writeBigInt64LE(BigInt(ns % 1e9), 8);
  need().futex(SYS_FUTEX, seg.ptr + BigInt(offset), FUTEX_WAIT, expected, timespec, null, 0);
}

export function futexWake(seg: ShmSegment, offset: number): void {
  need().futex(SYS_FUTEX, seg.ptr + BigInt(offset), FUTEX_WAKE, 0x7fffffff, null, null, 0);
}

/** Removes segments left by tandem processes that died without cleaning up (e.g. SIGKILL). */
export function sweepStale(): number {
  let removed = 0;
  let names: string[];
  try {
    names = readdirSync('/dev/shm');
  } catch {
    return 0;
  }
  for (const n of names) {
    const m = /^tandem-([0-9]+)-/.exec(n);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || alive(pid)) continue;
    if (loadLibc()?.shm_unlink('/' + n) === 0) removed++;
  }
  return removed;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
