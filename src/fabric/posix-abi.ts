/**
 * The C library facts the shm provider and the raw socket calls depend on, for the two
 * platforms tandem runs on: the library to load, how errno is reached, and the numeric
 * constants of <fcntl.h>, <sys/mman.h>, <sys/socket.h>, <netinet/tcp.h>, <poll.h> and
 * <errno.h>. Every other file of the fabric takes them from here, so a port is this table.
 *
 * Linux values are glibc's on x86_64 and arm64 (the same on both); a test compiles a C
 * program against this machine's headers and compares. macOS values are those of Apple's
 * xnu headers (bsd/sys/fcntl.h, mman.h, socket.h, errno.h, posix_shm.h); they are not run
 * here (docs/fabric.md, "Written for macOS, not yet run there").
 */
export interface PosixAbi {
  platform: 'linux' | 'darwin';
  /** The C library as koffi.load names it. */
  libc: string;
  /** The function returning this thread's errno address. */
  errnoFunction: string;
  O_RDWR: number;
  O_CREAT: number;
  O_EXCL: number;
  O_NONBLOCK: number;
  F_GETFL: number;
  PROT_READ_WRITE: number;
  MAP_SHARED: number;
  MAP_PRIVATE: number;
  MAP_FIXED: number;
  MAP_ANONYMOUS: number;
  /** 0 where mmap cannot pre-fault the pages (macOS: pages fault in at first touch). */
  MAP_POPULATE: number;
  /** Whether posix_fallocate exists (macOS has none: a segment is only ftruncated). */
  hasFallocate: boolean;
  MSG_DONTWAIT: number;
  /** 0 where send has no such flag; Node ignores SIGPIPE, so a dead peer is an EPIPE either way. */
  MSG_NOSIGNAL: number;
  EAGAIN: number;
  EINTR: number;
  POLLIN: number;
  POLLOUT: number;
  SOL_SOCKET: number;
  SO_SNDBUF: number;
  SO_RCVBUF: number;
  IPPROTO_TCP: number;
  /** Milliseconds unacknowledged data may wait before the kernel drops the connection; undefined where absent. */
  TCP_USER_TIMEOUT: number | undefined;
  /** Longest shared-memory object name, its leading '/' included. */
  shmNameMax: number;
  /**
   * Where the names of this host's shared-memory objects can be listed (to sweep those of dead
   * processes): Linux shows them as files in /dev/shm; macOS cannot list them, so tandem keeps
   * a file per segment it creates in a directory of its own.
   */
  shmListing: 'dev-shm' | 'registry';
}

const linux: PosixAbi = {
  platform: 'linux',
  libc: 'libc.so.6',
  errnoFunction: '__errno_location',
  O_RDWR: 2,
  O_CREAT: 0o100,
  O_EXCL: 0o200,
  O_NONBLOCK: 0o4000,
  F_GETFL: 3,
  PROT_READ_WRITE: 3,
  MAP_SHARED: 1,
  MAP_PRIVATE: 2,
  MAP_FIXED: 0x10,
  MAP_ANONYMOUS: 0x20,
  MAP_POPULATE: 0x8000,
  hasFallocate: true,
  MSG_DONTWAIT: 0x40,
  MSG_NOSIGNAL: 0x4000,
  EAGAIN: 11,
  EINTR: 4,
  POLLIN: 1,
  POLLOUT: 4,
  SOL_SOCKET: 1,
  SO_SNDBUF: 7,
  SO_RCVBUF: 8,
  IPPROTO_TCP: 6,
  TCP_USER_TIMEOUT: 18,
  shmNameMax: 255,
  shmListing: 'dev-shm',
};

const darwin: PosixAbi = {
  platform: 'darwin',
  libc: 'libSystem.B.dylib',
  errnoFunction: '__error',
  O_RDWR: 0x2,
  O_CREAT: 0x200,
  O_EXCL: 0x800,
  O_NONBLOCK: 0x4,
  F_GETFL: 3,
  PROT_READ_WRITE: 3,
  MAP_SHARED: 0x1,
  MAP_PRIVATE: 0x2,
  MAP_FIXED: 0x10,
  MAP_ANONYMOUS: 0x1000,
  MAP_POPULATE: 0,
  hasFallocate: false,
  MSG_DONTWAIT: 0x80,
  MSG_NOSIGNAL: 0,
  EAGAIN: 35,
  EINTR: 4,
  POLLIN: 1,
  POLLOUT: 4,
  SOL_SOCKET: 0xffff,
  SO_SNDBUF: 0x1001,
  SO_RCVBUF: 0x1002,
  IPPROTO_TCP: 6,
  TCP_USER_TIMEOUT: undefined,
  // PSHMNAMLEN: 31 characters, copied in with the terminating NUL (xnu bsd/sys/posix_shm.h)
  shmNameMax: 31,
  shmListing: 'registry',
};

/** The table for `platform`, or undefined where tandem has none (the providers then say so). */
export function posixAbi(platform: NodeJS.Platform = process.platform): PosixAbi | undefined {
  if (platform === 'linux') return linux;
  if (platform === 'darwin') return darwin;
  return undefined;
}
