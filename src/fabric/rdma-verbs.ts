import { TandemError } from '../errors/index.js';
import { declared, loadKoffi, makeLayout, type Koffi, type Layout } from './rdma-verbs-structs.js';

/**
 * The ibverbs library through koffi: the one module that knows which library a platform has
 * and binds its functions (the C layouts are rdma-verbs-structs.ts, the enums
 * rdma-verbs-enums.ts).
 *
 * Linux loads rdma-core's libibverbs.so.1; macOS 26.2+ loads Apple's librdma.dylib, which
 * exports the same `ibv_*` API (MLX's JACCL loads it the same way). The layouts below are
 * rdma-core's <infiniband/verbs.h> on LP64 (x86_64, arm64); rdma-verbs.test.ts checks them
 * against offsets compiled from that header. ibv_post_send, ibv_post_recv, ibv_poll_cq and
 * ibv_req_notify_cq are static inlines in verbs.h that call through the context's ops table
 * (struct ibv_context_ops), so they are bound here by decoding those function pointers.
 */

type KoffiFn = (...args: unknown[]) => unknown;

/** The library's file name on this platform, or undefined where there is none. */
export function verbsLibraryName(platform: NodeJS.Platform = process.platform): string | undefined {
  if (platform === 'linux') return 'libibverbs.so.1';
  if (platform === 'darwin') return 'librdma.dylib';
  return undefined;
}

/** How to get the library where it is missing. */
export function verbsInstallHint(platform: NodeJS.Platform = process.platform): string {
  if (platform === 'darwin') return 'needs macOS 26.2+ with `rdma_ctl enable` run once from Recovery';
  if (platform === 'linux') return 'install libibverbs1 and ibverbs-providers (rdma-core)';
  return `no RDMA verbs library is known on ${platform}`;
}

/** The exported ibverbs functions the provider calls (pointers are BigInt; 0n is NULL). */
export interface VerbsFunctions {
  ibv_get_device_list(num: number[]): bigint;
  ibv_free_device_list(list: bigint): void;
  ibv_get_device_name(device: bigint): string;
  ibv_open_device(device: bigint): bigint;
  ibv_close_device(ctx: bigint): number;
  ibv_query_device(ctx: bigint, attr: Uint8Array): number;
  ibv_query_port(ctx: bigint, port: number, attr: Uint8Array): number;
  ibv_query_gid(ctx: bigint, port: number, index: number, gid: Uint8Array): number;
  ibv_alloc_pd(ctx: bigint): bigint;
  ibv_dealloc_pd(pd: bigint): number;
  ibv_reg_mr(pd: bigint, addr: bigint, length: number, access: number): bigint;
  ibv_dereg_mr(mr: bigint): number;
  ibv_create_comp_channel(ctx: bigint): bigint;
  ibv_destroy_comp_channel(channel: bigint): number;
  ibv_create_cq(ctx: bigint, cqe: number, cqContext: bigint, channel: bigint, vector: number): bigint;
  ibv_destroy_cq(cq: bigint): number;
  ibv_get_cq_event(channel: bigint, cq: bigint[], cqContext: bigint[]): number;
  ibv_ack_cq_events(cq: bigint, n: number): void;
  ibv_create_qp(pd: bigint, attr: Uint8Array): bigint;
  ibv_modify_qp(qp: bigint, attr: Uint8Array, mask: number): number;
  ibv_destroy_qp(qp: bigint): number;
}

/** The ops-table calls, bound for one device context. */
export interface ContextOps {
  postSend(qp: bigint, wr: Uint8Array, bad: Uint8Array): number;
  postRecv(qp: bigint, wr: Uint8Array, bad: Uint8Array): number;
  pollCq(cq: bigint, n: number, wcs: Uint8Array): number;
  reqNotifyCq(cq: bigint, solicitedOnly: number): number;
}

export interface Verbs {
  readonly library: string;
  readonly fn: VerbsFunctions;
  readonly layout: Layout;
  /** Binds the ops-table calls of an open device context. */
  contextOps(ctx: bigint): ContextOps;
  /** The address of a typed array's first byte (stable: ArrayBuffer storage does not move). */
  addressOf(bytes: Uint8Array): bigint;
  /** The C errno of the last failed call on this thread. */
  errno(): number;
  /** The pointer / uint32 at `offset` bytes past the C address `base`. */
  readPointer(base: bigint, offset: number): bigint;
  readU32(base: bigint, offset: number): number;
}

const SIGNATURES: Record<keyof VerbsFunctions, string> = {
  ibv_get_device_list: 'void *ibv_get_device_list(_Out_ int *num)',
  ibv_free_device_list: 'void ibv_free_device_list(void *list)',
  ibv_get_device_name: 'const char *ibv_get_device_name(void *device)',
  ibv_open_device: 'void *ibv_open_device(void *device)',
  ibv_close_device: 'int ibv_close_device(void *ctx)',
  ibv_query_device: 'int ibv_query_device(void *ctx, _Out_ uint8_t *attr)',
  ibv_query_port: 'int ibv_query_port(void *ctx, uint8_t port, _Out_ uint8_t *attr)',
  ibv_query_gid: 'int ibv_query_gid(void *ctx, uint8_t port, int index, _Out_ uint8_t *gid)',
  ibv_alloc_pd: 'void *ibv_alloc_pd(void *ctx)',
  ibv_dealloc_pd: 'int ibv_dealloc_pd(void *pd)',
  ibv_reg_mr: 'void *ibv_reg_mr(void *pd, void *addr, size_t length, int access)',
  ibv_dereg_mr: 'int ibv_dereg_mr(void *mr)',
  ibv_create_comp_channel: 'void *ibv_create_comp_channel(void *ctx)',
  ibv_destroy_comp_channel: 'int ibv_destroy_comp_channel(void *channel)',
  ibv_create_cq: 'void *ibv_create_cq(void *ctx, int cqe, void *cq_context, void *channel, int vector)',
  ibv_destroy_cq: 'int ibv_destroy_cq(void *cq)',
  ibv_get_cq_event: 'int ibv_get_cq_event(void *channel, _Out_ void **cq, _Out_ void **cq_context)',
  ibv_ack_cq_events: 'void ibv_ack_cq_events(void *cq, unsigned int n)',
  ibv_create_qp: 'void *ibv_create_qp(void *pd, _Inout_ uint8_t *attr)',
  ibv_modify_qp: 'int ibv_modify_qp(void *qp, uint8_t *attr, int mask)',
  ibv_destroy_qp: 'int ibv_destroy_qp(void *qp)',
};

let cached: Verbs | undefined;
let cachedError: string | undefined;

/** Why the verbs library cannot be used here, or undefined when it can (loads it once). */
export function verbsProblem(): string | undefined {
  loadVerbs();
  return cachedError;
}

/** Loads the platform's verbs library once; undefined (see verbsProblem) when impossible. */
export function loadVerbs(): Verbs | undefined {
  if (cached || cachedError !== undefined) return cached;
  const library = verbsLibraryName();
  if (library === undefined) {
    cachedError = verbsInstallHint();
    return undefined;
  }
  let koffi: Koffi;
  try {
    koffi = loadKoffi();
  } catch (e) {
    cachedError = `koffi is missing: ${(e as Error).message}`;
    return undefined;
  }
  let lib: ReturnType<Koffi['load']>;
  try {
    lib = koffi.load(library);
  } catch {
    cachedError = `${library} not found: ${verbsInstallHint()}`;
    return undefined;
  }
  try {
    cached = bind(koffi, lib, library);
  } catch (e) {
    cachedError = `${library} lacks a verbs symbol: ${(e as Error).message}`;
  }
  return cached;
}

function bind(koffi: Koffi, lib: ReturnType<Koffi['load']>, library: string): Verbs {
  // koffi returns NULL as null: the functions below return 0n instead, so a pointer is always a bigint.
  const fn = Object.fromEntries(
    Object.entries(SIGNATURES).map(([name, sig]) => {
      const f = lib.func(sig) as KoffiFn;
      return [name, sig.startsWith('void *') ? (...a: unknown[]) => (f(...a) as bigint | null) ?? 0n : f];
    }),
  ) as unknown as VerbsFunctions;
  const layout = makeLayout(koffi, declared());
  const libc = koffi.load(process.platform === 'darwin' ? 'libSystem.B.dylib' : 'libc.so.6');
  const memset = libc.func('void *memset(uint8_t *s, int c, size_t n)') as KoffiFn;
  const errnoLocation = libc.func(
    process.platform === 'darwin' ? 'int *__error(void)' : 'int *__errno_location(void)',
  ) as KoffiFn;
  const protos = {
    post: koffi.proto('int tandem_ibv_post(void *qp, uint8_t *wr, _Out_ uint8_t *bad)'),
    poll: koffi.proto('int tandem_ibv_poll_cq(void *cq, int n, _Out_ uint8_t *wc)'),
    notify: koffi.proto('int tandem_ibv_req_notify_cq(void *cq, int solicited_only)'),
  };
  const opsBase = layout.offset('ibv_context', 'ops');
  const op = (ctx: bigint, name: string, proto: ReturnType<Koffi['proto']>): KoffiFn => {
    const ptr = (koffi.decode(ctx, opsBase + layout.offset('ibv_context_ops', name), 'void *') ??
      0n) as bigint;
    if (ptr === 0n) {
      throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `the device's ${name} entry is NULL`, {
        hint: 'the verbs provider library of this device is incomplete; reinstall ibverbs-providers',
      });
    }
    return koffi.decode(ptr, proto) as KoffiFn;
  };
  return {
    library,
    fn,
    layout,
    contextOps(ctx) {
      const postSend = op(ctx, 'post_send', protos.post);
      const postRecv = op(ctx, 'post_recv', protos.post);
      const pollCq = op(ctx, 'poll_cq', protos.poll);
      const reqNotifyCq = op(ctx, 'req_notify_cq', protos.notify);
      return {
        postSend: (qp, wr, bad) => postSend(qp, wr, bad) as number,
        postRecv: (qp, wr, bad) => postRecv(qp, wr, bad) as number,
        pollCq: (cq, n, wcs) => pollCq(cq, n, wcs) as number,
        reqNotifyCq: (cq, s) => reqNotifyCq(cq, s) as number,
      };
    },
    addressOf: (bytes) => memset(bytes, 0, 0) as bigint,
    errno: () => koffi.decode(errnoLocation(), 'int') as number,
    readPointer: (base, offset) => (koffi.decode(base, offset, 'void *') ?? 0n) as bigint,
    readU32: (base, offset) => koffi.decode(base, offset, 'uint32_t') as number,
  };
}
