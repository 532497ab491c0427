import { createRequire } from 'node:module';

/**
 * Transparent huge pages for the kernel arenas (Linux). Weights are written once into a
 * shared wasm memory and then read in full for every token; with 4 KiB pages a 1.1 GB model
 * is ~290,000 page faults when it loads and a TLB miss every 4 KiB while it runs. On a
 * kernel whose THP mode is `madvise` (Debian's default) an anonymous mapping gets 2 MiB pages
 * only when asked. With 2 MiB pages a load takes 1/512 of the faults, which matters where a
 * fault is expensive (a virtual machine's guest): docs/engine.md, "Huge pages", has the
 * figures. TANDEM_HUGE_PAGES=0 turns the advice off.
 */
const MADV_HUGEPAGE = 14;

type Madvise = (addr: Uint8Array, len: number, advice: number) => number;

let madvise: Madvise | null | undefined;

function load(): Madvise | null {
  if (madvise !== undefined) return madvise;
  madvise = null;
  if (process.platform !== 'linux' || process.env.TANDEM_HUGE_PAGES === '0') return madvise;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    madvise = koffi.load('libc.so.6').func('int madvise(void *addr, size_t len, int advice)') as Madvise;
  } catch {
    madvise = null;
  }
  return madvise;
}

/**
 * Asks for huge pages over `bytes` from the start of `memory` (its whole reservation, grown
 * or not: the advice stays with the mapping as it grows). True when the kernel took it; false
 * where it cannot be asked (not Linux, no koffi, a kernel built without THP,
 * TANDEM_HUGE_PAGES=0). Where THP is `never` the kernel takes the advice and ignores it.
 * The memory works the same either way.
 */
export function adviseHugePages(memory: ArrayBufferLike, bytes: number): boolean {
  const fn = load();
  if (fn === null || memory.byteLength === 0) return false;
  try {
    return fn(new Uint8Array(memory, 0, 1), bytes, MADV_HUGEPAGE) === 0;
  } catch {
    return false;
  }
}
