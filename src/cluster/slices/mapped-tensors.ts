import { closeSync, openSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import { posixAbi } from '../../fabric/posix-abi.js';

/** <sys/mman.h>: the same values on Linux and macOS. */
const PROT_READ = 1;
const MAP_SHARED = 1;
const MAP_FAILED = 2n ** 64n - 1n;
const PAGE = 65536;

type Mmap = (addr: null, len: number, prot: number, flags: number, fd: number, off: number) => unknown;

interface Koffi {
  address(p: unknown): bigint;
  view(p: unknown, len: number): ArrayBuffer;
}

/** Views of every file's tensors mapped so far, by path and stat: mapped once per process. */
const mapped = new Map<string, Map<string, Uint8Array>>();
let mmap: { call: Mmap; koffi: Koffi } | null | undefined;

function loadMmap(): { call: Mmap; koffi: Koffi } | null {
  if (mmap !== undefined) return mmap;
  mmap = null;
  const abi = posixAbi();
  if (!abi || process.env.TANDEM_SLICE_SEND === 'read') return mmap;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const lib = koffi.load(abi.libc);
    mmap = {
      call: lib.func('void *mmap(void *addr, size_t len, int prot, int flags, int fd, int64_t off)') as Mmap,
      koffi: koffi as unknown as Koffi,
    };
  } catch {
    // no koffi or libc here: the server reads into buffers instead
  }
  return mmap;
}

/**
 * A GGUF file's tensors mapped read-only into this process (mmap through koffi, one mapping
 * per tensor), for the slice server's sends: a socket write of a view copies the bytes from
 * the page cache straight into the kernel's socket buffers, where a read into a buffer first
 * copies them once more (the larger part of the coordinator's main-thread time per GB). Only
 * the kernel reads these views, in its send copy, where a page gone from under a file
 * truncated meanwhile fails that one write (EFAULT, the connection ends) rather than raising
 * a signal: JavaScript and hashing never touch them. Mapped once per file (path and stat) for
 * the process's life and never unmapped: a mapping costs address space, not memory, and a
 * socket may still be sending from it when a load ends. Undefined for a model folder, off
 * Linux and macOS, or with TANDEM_SLICE_SEND=read.
 */
export function mappedTensors(
  path: string,
  file: GgufModelFile,
): ReadonlyMap<string, Uint8Array> | undefined {
  const s = statSync(path);
  if (s.isDirectory()) return undefined;
  const key = `${path}|${s.dev}|${s.ino}|${s.size}|${s.mtimeMs}`;
  const known = mapped.get(key);
  if (known) return known;
  const m = loadMmap();
  if (!m) return undefined;
  const views = new Map<string, Uint8Array>();
  const fd = openSync(path, 'r');
  try {
    for (const t of file.gguf.tensors) {
      if (t.byteLength === 0) continue;
      const from = Math.floor(t.fileOffset / PAGE) * PAGE;
      const length = t.fileOffset + t.byteLength - from;
      const p = m.call(null, length, PROT_READ, MAP_SHARED, fd, from);
      if (p === null || m.koffi.address(p) === MAP_FAILED) return undefined;
      views.set(t.name, new Uint8Array(m.koffi.view(p, length), t.fileOffset - from, t.byteLength));
    }
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
  mapped.set(key, views);
  return views;
}
