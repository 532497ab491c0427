import { createRequire } from 'node:module';
import { sha256 } from './manifest.js';

/** The SHA-256 of a piece, hex; `data` must not change until it resolves. */
export type PieceDigest = (data: Uint8Array) => Promise<string>;

let digest: PieceDigest | undefined;

/**
 * SHA-256 of received pieces off the main thread: OpenSSL's one-shot `SHA256` called through
 * koffi's asynchronous calls, which run on libuv's thread pool and read the piece where it lies
 * (no copy; the caller keeps it unchanged until the promise settles). The function comes from
 * the OpenSSL that Node itself carries (its symbols are exported to addons), else from the
 * system's libcrypto; the bytes hashed and the hash are exactly node:crypto's (checked on a
 * known input before use). Where none loads, or TANDEM_SLICE_HASH=node, node:crypto hashes on
 * the main thread. The receive loop then only copies bytes in while the pool hashes the
 * pieces before them, so hashing no longer adds to the time each piece holds the event loop.
 */
export function pieceDigest(): PieceDigest {
  digest ??= (process.env.TANDEM_SLICE_HASH === 'node' ? undefined : openSslDigest()) ?? mainThreadDigest;
  return digest;
}

/** Whether pieceDigest hashes off the main thread in this process. */
export function digestOffThread(): boolean {
  return pieceDigest() !== mainThreadDigest;
}

/** Pieces hashed on the pool at once: enough to keep libuv's 4 threads busy. */
const IN_FLIGHT = 8;

const mainThreadDigest: PieceDigest = (data) => Promise.resolve(sha256(data));

interface AsyncSha256 {
  (data: Uint8Array, length: number, md: Uint8Array): unknown;
  async(data: Uint8Array, length: number, md: Uint8Array, done: (e: unknown) => void): void;
}

function openSslDigest(): PieceDigest | undefined {
  let koffi: typeof import('koffi');
  try {
    koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
  } catch {
    return undefined;
  }
  // null: this process (Node's own OpenSSL)
  for (const name of [null, 'libcrypto.so.3', 'libcrypto.3.dylib']) {
    try {
      const lib = koffi.load(name as unknown as string);
      const fn = lib.func(
        'uint8_t *SHA256(const uint8_t *d, size_t n, uint8_t *md)',
      ) as unknown as AsyncSha256;
      const probe = new Uint8Array(4099).map((_, i) => (i * 31) & 0xff);
      const md = new Uint8Array(32);
      fn(probe, probe.length, md);
      if (Buffer.from(md).toString('hex') !== sha256(probe)) continue;
      return queued(fn);
    } catch {
      // not in this process or not installed: the next, else node:crypto
    }
  }
  return undefined;
}

/**
 * Hashes at most IN_FLIGHT pieces on the pool at once, the rest waiting their turn here: koffi
 * refuses asynchronous calls past its queue's bound (256), and a slice of a large tensor
 * arrives as hundreds of pieces faster than the pool hashes them. A call koffi refuses anyway
 * is hashed here, on the main thread.
 */
function queued(fn: AsyncSha256): PieceDigest {
  const waiting: (() => void)[] = [];
  let running = 0;
  const next = (): void => {
    running--;
    waiting.shift()?.();
  };
  return (data) =>
    new Promise((resolve, reject) => {
      const start = (): void => {
        running++;
        const out = Buffer.allocUnsafe(32);
        try {
          fn.async(data, data.length, out, (e) => {
            next();
            // `data` is named here so that it stays alive until the pool thread is done with it
            if (e || data.length < 0) reject(e as Error);
            else resolve(out.toString('hex'));
          });
        } catch {
          next();
          resolve(sha256(data));
        }
      };
      if (running < IN_FLIGHT) start();
      else waiting.push(start);
    });
}
