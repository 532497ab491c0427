import { createRequire } from 'node:module';

/**
 * Non-blocking socket calls through koffi, for the tcp data path: while a wait busy-polls,
 * recv/send with MSG_DONTWAIT cost one syscall each and no event-loop wake-up.
 */
export interface SocketLib {
  recv(fd: number, buf: Uint8Array, len: number, flags: number): number;
  send(fd: number, buf: Uint8Array, len: number, flags: number): number;
  /** writev(2) of whole views (Node ignores SIGPIPE, so a dead peer is an EPIPE errno). */
  writev(fd: number, parts: readonly Uint8Array[]): number;
  /** Whether the descriptor is in non-blocking mode (O_NONBLOCK; libuv puts its sockets there). */
  nonBlocking(fd: number): boolean;
  poll(fds: Uint8Array, n: number, timeoutMs: number): number;
  /** setsockopt(SOL_SOCKET, opt, int value); 0 or -1. */
  setIntOption(fd: number, opt: number, value: number): number;
  /** setsockopt(IPPROTO_TCP, opt, int value); 0 or -1. */
  setTcpOption(fd: number, opt: number, value: number): number;
  /** errno of the last failed call (this thread's). */
  errno(): number;
}

export const MSG_DONTWAIT = 0x40;
export const MSG_NOSIGNAL = 0x4000;
export const EAGAIN = 11;
export const EINTR = 4;
export const POLLIN = 1;
export const POLLOUT = 4;
export const SO_SNDBUF = 7;
export const SO_RCVBUF = 8;
/** Milliseconds sent data may stay unacknowledged before the kernel drops the connection (Linux). */
export const TCP_USER_TIMEOUT = 18;
const SOL_SOCKET = 1;
const IPPROTO_TCP = 6;
const F_GETFL = 3;
const O_NONBLOCK = 0o4000;

let lib: SocketLib | null | undefined;

/** The socket calls, or null where koffi or libc cannot provide them (then tcp uses node:net). */
export function socketLib(): SocketLib | null {
  return process.env.TANDEM_TCP_DATAPATH === 'net' ? null : rawSocketLib();
}

/** The socket calls regardless of TANDEM_TCP_DATAPATH (e.g. for the shm doorbell). */
export function rawSocketLib(): SocketLib | null {
  if (lib !== undefined) return lib;
  lib = null;
  if (process.platform !== 'linux') return lib;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const c = koffi.load('libc.so.6');
    const recv = c.func('long recv(int fd, void *buf, size_t len, int flags)');
    const send = c.func('long send(int fd, const void *buf, size_t len, int flags)');
    const poll = c.func('int poll(void *fds, unsigned long n, int timeout)');
    const loc = c.func('int *__errno_location(void)');
    const setsockopt = c.func('int setsockopt(int fd, int level, int opt, void *val, uint32_t len)');
    koffi.struct('tandem_iovec', { base: 'void *', len: 'size_t' });
    const fcntl = c.func('int fcntl(int fd, int cmd, ...)');
    const writev = c.func('long writev(int fd, const tandem_iovec *iov, int cnt)');
    const intBuf = new Int32Array(1);
    const errnoView = new Int32Array(koffi.view(loc(), 4));
    lib = {
      recv: (fd, buf, len, flags) => Number(recv(fd, buf, len, flags)),
      send: (fd, buf, len, flags) => Number(send(fd, buf, len, flags)),
      writev: (fd, parts) =>
        Number(
          writev(
            fd,
            parts.map((p) => ({ base: p, len: p.length })),
            parts.length,
          ),
        ),
      poll: (fds, n, t) => poll(fds, n, t) as number,
      nonBlocking: (fd) => {
        const flags = fcntl(fd, F_GETFL) as number;
        return flags >= 0 && (flags & O_NONBLOCK) !== 0;
      },
      errno: () => errnoView[0] as number,
      setIntOption: (fd, opt, value) => {
        intBuf[0] = value;
        return setsockopt(fd, SOL_SOCKET, opt, intBuf, 4) as number;
      },
      setTcpOption: (fd, opt, value) => {
        intBuf[0] = value;
        return setsockopt(fd, IPPROTO_TCP, opt, intBuf, 4) as number;
      },
    };
  } catch {
    lib = null;
  }
  return lib;
}
