import { createRequire } from 'node:module';
import { posixAbi } from './posix-abi.js';

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
  /**
   * errno of the last call of this interface that failed, captured as it returned: the
   * thread's errno itself may since have been changed by whatever ran in between (V8's own
   * system calls at a function entry or a GC, Node's fs calls).
   */
  errno(): number;
}

// The constants of this platform (Linux's where tandem has no table: the calls are then not made).
const abi = posixAbi() ?? posixAbi('linux')!;
export const MSG_DONTWAIT = abi.MSG_DONTWAIT;
export const MSG_NOSIGNAL = abi.MSG_NOSIGNAL;
export const EAGAIN = abi.EAGAIN;
export const EINTR = abi.EINTR;
export const POLLIN = abi.POLLIN;
export const POLLOUT = abi.POLLOUT;
export const SO_SNDBUF = abi.SO_SNDBUF;
export const SO_RCVBUF = abi.SO_RCVBUF;
/** Milliseconds sent data may stay unacknowledged before the kernel drops the connection; undefined where absent. */
export const TCP_USER_TIMEOUT = abi.TCP_USER_TIMEOUT;

let lib: SocketLib | null | undefined;

/** The socket calls, or null where koffi or libc cannot provide them (then tcp uses node:net). */
export function socketLib(): SocketLib | null {
  return process.env.TANDEM_TCP_DATAPATH === 'net' ? null : rawSocketLib();
}

/** The socket calls regardless of TANDEM_TCP_DATAPATH (e.g. for the shm doorbell). */
export function rawSocketLib(): SocketLib | null {
  if (lib !== undefined) return lib;
  lib = null;
  const here = posixAbi();
  if (here === undefined) return lib;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const c = koffi.load(here.libc);
    const recv = c.func('long recv(int fd, void *buf, size_t len, int flags)');
    const send = c.func('long send(int fd, const void *buf, size_t len, int flags)');
    const poll = c.func('int poll(void *fds, unsigned long n, int timeout)');
    const loc = c.func(`int *${here.errnoFunction}(void)`);
    const setsockopt = c.func('int setsockopt(int fd, int level, int opt, void *val, uint32_t len)');
    koffi.struct('tandem_iovec', { base: 'void *', len: 'size_t' });
    const fcntl = c.func('int fcntl(int fd, int cmd, ...)');
    const writev = c.func('long writev(int fd, const tandem_iovec *iov, int cnt)');
    const intBuf = new Int32Array(1);
    const errnoView = new Int32Array(koffi.view(loc(), 4));
    // errno is read in each wrapper right after its call returns, before any other function
    // is entered (a function entry is where V8 may run its own work, system calls included)
    let lastErrno = 0;
    /** recv or send(fd, buf, len, flags): the bytes moved, or -1 with its errno kept. */
    const transfer =
      (call: typeof recv) =>
      (fd: number, buf: Uint8Array, len: number, flags: number): number => {
        const r = call(fd, buf, len, flags);
        const e = errnoView[0] as number;
        const n = Number(r);
        if (n < 0) lastErrno = e;
        return n;
      };
    /** setsockopt(fd, level, opt, int value): 0, or -1 with its errno kept. */
    const setOption =
      (level: number) =>
      (fd: number, opt: number, value: number): number => {
        intBuf[0] = value;
        const r = setsockopt(fd, level, opt, intBuf, 4) as number;
        if (r < 0) lastErrno = errnoView[0] as number;
        return r;
      };
    lib = {
      recv: transfer(recv),
      send: transfer(send),
      writev: (fd, parts) => {
        const iov = parts.map((p) => ({ base: p, len: p.length }));
        const r = writev(fd, iov, parts.length);
        const e = errnoView[0] as number;
        const n = Number(r);
        if (n < 0) lastErrno = e;
        return n;
      },
      poll: (fds, n, t) => {
        const r = poll(fds, n, t) as number;
        if (r < 0) lastErrno = errnoView[0] as number;
        return r;
      },
      nonBlocking: (fd) => {
        const flags = fcntl(fd, here.F_GETFL) as number;
        return flags >= 0 && (flags & here.O_NONBLOCK) !== 0;
      },
      errno: () => lastErrno,
      setIntOption: setOption(here.SOL_SOCKET),
      setTcpOption: setOption(here.IPPROTO_TCP),
    };
  } catch {
    lib = null;
  }
  return lib;
}
