import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import { Arena } from './wasm-arena.js';
import { wasmApi } from './wasm-api.js';

/** The flags of the mapping that holds `addr` in this process (/proc/self/smaps "VmFlags"). */
function vmFlags(addr: bigint): string[] {
  let inside = false;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (range) inside = BigInt(`0x${range[1]}`) <= addr && addr < BigInt(`0x${range[2]}`);
    else if (inside && line.startsWith('VmFlags:')) return line.slice(8).trim().split(/\s+/);
  }
  throw new Error(`no mapping holds 0x${addr.toString(16)}`);
}

/** The address of a view's first byte (memmove with a length of 0 returns its destination). */
function addressOf(view: Uint8Array): bigint {
  const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
  const move = koffi.load('libc.so.6').func('uintptr_t memmove(void *dst, const void *src, size_t n)');
  return BigInt(move(view, view, 0) as number | bigint);
}

const thp = '/sys/kernel/mm/transparent_hugepage/enabled';
const skip =
  process.platform !== 'linux' || !existsSync(thp)
    ? 'needs Linux with transparent huge pages'
    : /\[never\]/.test(readFileSync(thp, 'utf8'))
      ? 'transparent huge pages are off on this machine'
      : process.env.TANDEM_HUGE_PAGES === '0'
        ? 'TANDEM_HUGE_PAGES=0'
        : false;

test(
  'a kernel arena is advised huge pages over its whole reservation, a plain wasm memory is not',
  { skip },
  () => {
    const arena = new Arena(0, 256 << 20);
    const ptr = arena.alloc(8 << 20); // grows the memory past its first pages
    arena.u8.fill(1, ptr, ptr + (8 << 20));
    const base = addressOf(arena.u8);
    // VM_HUGEPAGE shows as "hg": on the grown part and on the reserved part not grown yet
    assert.ok(vmFlags(base + BigInt(ptr)).includes('hg'), 'grown part');
    assert.ok(vmFlags(base + (3n << 30n)).includes('hg'), 'reserved part');
    const plain = new wasmApi.Memory({ initial: 160, maximum: 65536, shared: true });
    assert.ok(!vmFlags(addressOf(new Uint8Array(plain.buffer))).includes('hg'), 'plain memory');
  },
);
