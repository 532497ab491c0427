import { createRequire } from 'node:module';
import { TandemError } from '../errors/index.js';
import { wasmApi } from '../kernels/wasm-api.js';
import { posixAbi, type PosixAbi } from './posix-abi.js';
import { shmNamesFor, type ShmNames } from './shm-names.js';

/**
 * POSIX shared memory through koffi: shm_open + ftruncate, then mmap MAP_FIXED over the pages
 * of a shared WebAssembly.Memory, so each segment is a real SharedArrayBuffer. On it V8
 * compiles Atomics as the sequentially consistent accesses they are (on the plain ArrayBuffer
 * that koffi.view returns they are only promised to be atomic), and the views stay valid for
 * as long as JavaScript holds them: V8 unmaps the pages when it frees the memory, and
 * unmap() puts private zero pages over the shared ones instead of leaving a hole.
 * Linux and macOS (the platform's constants and library: posix-abi.ts).
 */
interface Libc {
  shm_open(name: string, oflag: number, mode: number): number;
  shm_unlink(name: string): number;
  ftruncate(fd: number, len: number): number;
  /** 0, or the error number (it does not set errno); absent where the platform has none. */
  posix_fallocate?(fd: number, offset: number, len: number): number;
  mmap(addr: bigint, len: number, prot: number, flags: number, fd: number, off: number): bigint;
  /** memset(s, 0, 0) does nothing and returns s: the address of a buffer's memory. */
  addressOf(s: Uint8Array, c: number, n: number): bigint;
  close(fd: number): number;
  sched_yield(): number;
}

const WASM_PAGE = 65536;
/** A wasm32 memory holds at most 2^16 pages. */
const MAX_SEGMENT = 65536 * WASM_PAGE;

const abi: PosixAbi | undefined = posixAbi();
/** Where this host's tandem segments are listed, for the sweep of dead processes' ones. */
const names: ShmNames | undefined = abi && shmNamesFor(abi);

let libc: Libc | undefined;
let loadError: string | undefined;

/** Loads libc through koffi once; undefined with a reason when that is impossible here. */
export function loadLibc(): Libc | undefined {
  if (libc || loadError) return libc;
  if (!abi) {
    loadError = `shm needs Linux or macOS (this is ${process.platform})`;
    return undefined;
  }
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const lib = koffi.load(abi.libc);
    const f = {
      // shm_open is variadic in C: on Apple arm64 the mode must go on the stack, as a variadic argument
      shm_open: (
        (open) =>
        (name: string, oflag: number, mode: number): number =>
          open(name, oflag, 'uint32_t', mode) as number
      )(lib.func('int shm_open(const char *name, int oflag, ...)')),
      shm_unlink: lib.func('int shm_unlink(const char *name)'),
      ftruncate: lib.func('int ftruncate(int fd, int64_t len)'),
      ...(abi.hasFallocate
        ? { posix_fallocate: lib.func('int posix_fallocate(int fd, int64_t offset, int64_t len)') }
        : {}),
      mmap: lib.func('uintptr_t mmap(uintptr_t addr, size_t len, int prot, int flags, int fd, int64_t off)'),
      addressOf: lib.func('uintptr_t memset(void *s, int c, size_t n)'),
      close: lib.func('int close(int fd)'),
      sched_yield: lib.func('int sched_yield(void)'),
    };
    libc = f as Libc;
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

export interface MapOptions {
  /**
   * Allocate every page now (posix_fallocate, for a new segment: a /dev/shm without room
   * fails here with FABRIC_SHM_FAILED, not with a SIGBUS at a later first touch) and map
   * them all (MAP_POPULATE: no page fault at a first touch). For segments that will be used
   * whole, such as the shm provider's rings (which also touch every page once: see
   * ShmTransport.touchRings): mapping them populated takes the page faults out of that touch
   * and makes connecting faster (docs/fabric.md, "Measured facts behind the data path's
   * constants").
   */
  populate?: boolean;
}

/** A mapped POSIX shared-memory segment: `buffer` holds it at offset 0 (and is longer: whole wasm pages). */
export class ShmSegment {
  readonly buffer: SharedArrayBuffer;
  private readonly address: bigint;
  private mapped = true;

  private constructor(
    readonly name: string,
    readonly length: number,
    fd: number,
    private owner: boolean,
    populate: boolean,
  ) {
    const c = need();
    const pages = Math.ceil(length / WASM_PAGE);
    // the memory object is reachable from its buffer; V8 frees (unmaps) it with the buffer
    try {
      this.buffer = new wasmApi.Memory({ initial: pages, maximum: pages, shared: true }).buffer;
    } catch (e) {
      throw shmError(`no address space for ${name} (${length} bytes): ${(e as Error).message}`);
    }
    this.address = c.addressOf(new Uint8Array(this.buffer, 0, 1), 0, 0);
    const { MAP_SHARED, MAP_FIXED, MAP_POPULATE, PROT_READ_WRITE } = abi!;
    const flags = MAP_SHARED | MAP_FIXED | (populate ? MAP_POPULATE : 0);
    if (c.mmap(this.address, length, PROT_READ_WRITE, flags, fd, 0) !== this.address)
      throw shmError(`mmap of ${name} (${length} bytes) failed`);
  }

  /**
   * Creates a new segment (name must not exist) and maps it (`populate`: see MapOptions).
   */
  static create(name: string, length: number, options: MapOptions = {}): ShmSegment {
    checkLength(length);
    const c = need();
    const { O_RDWR, O_CREAT, O_EXCL, shmNameMax } = abi!;
    if (name.length > shmNameMax)
      throw shmError(`the segment name ${name} is longer than this system's ${shmNameMax} characters`);
    const fd = c.shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0o600);
    if (fd < 0) throw shmError(`shm_open(${name}) failed`);
    owned.add(name);
    names!.add(name);
    unlinkOwnedOnExit();
    try {
      if (c.ftruncate(fd, length) !== 0)
        throw shmError(`ftruncate(${name}, ${length}) failed (is /dev/shm full?)`);
      // A page that does not fit in /dev/shm kills the process (SIGBUS) when first touched:
      // a segment mapped whole is allocated whole first, so a short /dev/shm is an error here.
      // (where posix_fallocate is missing, the first touch of a page past the system's room fails)
      const err = options.populate === true && c.posix_fallocate ? c.posix_fallocate(fd, 0, length) : 0;
      if (err !== 0) throw shmError(`/dev/shm has no room for ${name} (${length} bytes; error ${err})`);
      return new ShmSegment(name, length, fd, true, options.populate === true);
    } catch (e) {
      c.shm_unlink(name);
      owned.delete(name);
      names!.remove(name);
      throw e;
    } finally {
      c.close(fd);
    }
  }

  /** Maps a segment another process created. */
  static open(name: string, length: number, options: MapOptions = {}): ShmSegment {
    checkLength(length);
    const c = need();
    if (!/^\/tandem-[0-9]+-[0-9a-f]+(-[a-z]+)?$/.test(name))
      throw shmError(`refusing to map '${name}': not a tandem segment name`);
    const fd = c.shm_open(name, abi!.O_RDWR, 0);
    if (fd < 0) throw shmError(`shm_open(${name}) failed: the peer's segment is gone`);
    try {
      return new ShmSegment(name, length, fd, false, options.populate === true);
    } finally {
      c.close(fd);
    }
  }

  /** Removes the name (the mappings stay valid). Safe to call more than once. */
  unlink(): void {
    need().shm_unlink(this.name);
    owned.delete(this.name);
    names!.remove(this.name);
    this.owner = false;
  }

  /**
   * Stops sharing now: the name goes and private zero pages replace the shared ones, so views
   * of `buffer` stay safe to touch (they read zeros) and nothing written reaches the peer.
   * For memory still handed out to users, unlink() alone: V8 unmaps it with its buffer.
   */
  unmap(): void {
    if (!this.mapped) return;
    this.mapped = false;
    if (this.owner) this.unlink();
    const { MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED, PROT_READ_WRITE } = abi!;
    need().mmap(this.address, this.length, PROT_READ_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  }
}

function checkLength(length: number): void {
  if (!(Number.isInteger(length) && length > 0 && length <= MAX_SEGMENT))
    throw shmError(`a shared-memory segment of ${length} bytes is not possible (1 byte to 4 GiB)`);
}

function shmError(message: string): TandemError {
  return new TandemError('FABRIC_SHM_FAILED', message, {
    hint: 'check /dev/shm (mounted, writable, free space) or use the tcp provider',
  });
}

/**
 * Gives this thread's core to another runnable task, if any (sched_yield). For polling on an
 * oversubscribed host: a peer that is runnable gets the core at once, where a sleep would
 * wait for a knock and a wake-up. False where libc cannot be reached (nothing happened).
 */
export function yieldCore(): boolean {
  const c = loadLibc();
  if (c === undefined) return false;
  c.sched_yield();
  return true;
}

/**
 * Removes segments left by tandem processes that died without cleaning up (e.g. SIGKILL), as
 * `from` lists them (this platform's way by default: shm-names.ts).
 */
export function sweepStale(from: ShmNames | undefined = names): number {
  let removed = 0;
  const c = loadLibc();
  if (!c || !from) return 0;
  for (const name of from.list()) {
    const m = /^\/tandem-([0-9]+)-/.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || alive(pid)) continue;
    if (c.shm_unlink(name) === 0) removed++;
    from.remove(name);
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
