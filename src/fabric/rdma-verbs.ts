import { createRequire } from 'node:module';
import { TandemError } from '../errors/index.js';

/**
 * The ibverbs library through koffi: the one module that knows which library a platform has
 * and the C layouts of the structs the rdma provider reads and writes.
 *
 * Linux loads rdma-core's libibverbs.so.1; macOS 26.2+ loads Apple's librdma.dylib, which
 * exports the same `ibv_*` API (MLX's JACCL loads it the same way). The layouts below are
 * rdma-core's <infiniband/verbs.h> on LP64 (x86_64, arm64); rdma-verbs.test.ts checks them
 * against offsets compiled from that header. ibv_post_send, ibv_post_recv, ibv_poll_cq and
 * ibv_req_notify_cq are static inlines in verbs.h that call through the context's ops table
 * (struct ibv_context_ops), so they are bound here by decoding those function pointers.
 */

type Koffi = typeof import('koffi');
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

/** Values of verbs.h's enums that the provider uses. */
export const IBV = {
  ACCESS_LOCAL_WRITE: 1,
  ACCESS_REMOTE_WRITE: 2,
  ACCESS_REMOTE_READ: 4,
  QPT_RC: 2,
  QPT_UC: 3,
  QPS_RESET: 0,
  QPS_INIT: 1,
  QPS_RTR: 2,
  QPS_RTS: 3,
  QPS_ERR: 6,
  WR_RDMA_WRITE: 0,
  WR_RDMA_WRITE_WITH_IMM: 1,
  WR_SEND: 2,
  WR_RDMA_READ: 4,
  SEND_SIGNALED: 2,
  SEND_INLINE: 8,
  WC_SEND: 0,
  WC_RDMA_WRITE: 1,
  WC_RDMA_READ: 2,
  WC_RECV: 128,
  WC_RECV_RDMA_WITH_IMM: 129,
  WC_WITH_IMM: 2,
  LINK_LAYER_INFINIBAND: 1,
  LINK_LAYER_ETHERNET: 2,
  PORT_ACTIVE: 4,
} as const;

/** ibv_qp_attr_mask bits. */
export const QP_ATTR = {
  STATE: 1,
  ACCESS_FLAGS: 8,
  PKEY_INDEX: 16,
  PORT: 32,
  AV: 128,
  PATH_MTU: 256,
  TIMEOUT: 512,
  RETRY_CNT: 1024,
  RNR_RETRY: 2048,
  RQ_PSN: 4096,
  MAX_QP_RD_ATOMIC: 8192,
  MIN_RNR_TIMER: 32768,
  SQ_PSN: 65536,
  MAX_DEST_RD_ATOMIC: 131072,
  DEST_QPN: 1048576,
} as const;

/** ibv_wc_status names, by value (verbs.h order). */
export const WC_STATUS_NAMES = [
  'SUCCESS',
  'LOC_LEN_ERR',
  'LOC_QP_OP_ERR',
  'LOC_EEC_OP_ERR',
  'LOC_PROT_ERR',
  'WR_FLUSH_ERR',
  'MW_BIND_ERR',
  'BAD_RESP_ERR',
  'LOC_ACCESS_ERR',
  'REM_INV_REQ_ERR',
  'REM_ACCESS_ERR',
  'REM_OP_ERR',
  'RETRY_EXC_ERR',
  'RNR_RETRY_EXC_ERR',
  'LOC_RDD_VIOL_ERR',
  'REM_INV_RD_REQ_ERR',
  'REM_ABORT_ERR',
  'INV_EECN_ERR',
  'INV_EEC_STATE_ERR',
  'FATAL_ERR',
  'RESP_TIMEOUT_ERR',
  'GENERAL_ERR',
] as const;

/** The structs' layouts, declared once for koffi; offsets and sizes are read from these. */
function declareStructs(koffi: Koffi): Record<string, unknown> {
  // union ibv_gid: 16 raw bytes, 8-byte aligned by its { subnet_prefix, interface_id } view.
  const gid = koffi.struct('ibv_gid', { subnet_prefix: 'uint64_t', interface_id: 'uint64_t' });
  const qpCap = koffi.struct('ibv_qp_cap', {
    max_send_wr: 'uint32_t',
    max_recv_wr: 'uint32_t',
    max_send_sge: 'uint32_t',
    max_recv_sge: 'uint32_t',
    max_inline_data: 'uint32_t',
  });
  const grh = koffi.struct('ibv_global_route', {
    dgid: gid,
    flow_label: 'uint32_t',
    sgid_index: 'uint8_t',
    hop_limit: 'uint8_t',
    traffic_class: 'uint8_t',
  });
  const ah = koffi.struct('ibv_ah_attr', {
    grh,
    dlid: 'uint16_t',
    sl: 'uint8_t',
    src_path_bits: 'uint8_t',
    static_rate: 'uint8_t',
    is_global: 'uint8_t',
    port_num: 'uint8_t',
  });
  const ops = koffi.struct('ibv_context_ops', opsFields());
  return {
    ibv_qp_cap: qpCap,
    ibv_global_route: grh,
    ibv_ah_attr: ah,
    ibv_context_ops: ops,
    ibv_context: koffi.struct('ibv_context', {
      device: 'void *',
      ops,
      cmd_fd: 'int',
      async_fd: 'int',
      num_comp_vectors: 'int',
    }),
    ibv_port_attr: koffi.struct('ibv_port_attr', {
      state: 'int',
      max_mtu: 'int',
      active_mtu: 'int',
      gid_tbl_len: 'int',
      port_cap_flags: 'uint32_t',
      max_msg_sz: 'uint32_t',
      bad_pkey_cntr: 'uint32_t',
      qkey_viol_cntr: 'uint32_t',
      pkey_tbl_len: 'uint16_t',
      lid: 'uint16_t',
      sm_lid: 'uint16_t',
      lmc: 'uint8_t',
      max_vl_num: 'uint8_t',
      sm_sl: 'uint8_t',
      subnet_timeout: 'uint8_t',
      init_type_reply: 'uint8_t',
      active_width: 'uint8_t',
      active_speed: 'uint8_t',
      phys_state: 'uint8_t',
      link_layer: 'uint8_t',
      flags: 'uint8_t',
      port_cap_flags2: 'uint16_t',
    }),
    ibv_device_attr: koffi.struct('ibv_device_attr', deviceAttrFields(koffi)),
    ibv_wc: koffi.struct('ibv_wc', {
      wr_id: 'uint64_t',
      status: 'int',
      opcode: 'int',
      vendor_err: 'uint32_t',
      byte_len: 'uint32_t',
      imm_data: 'uint32_t',
      qp_num: 'uint32_t',
      src_qp: 'uint32_t',
      wc_flags: 'uint32_t',
      pkey_index: 'uint16_t',
      slid: 'uint16_t',
      sl: 'uint8_t',
      dlid_path_bits: 'uint8_t',
    }),
    ibv_sge: koffi.struct('ibv_sge', { addr: 'uint64_t', length: 'uint32_t', lkey: 'uint32_t' }),
    ibv_send_wr: koffi.struct('ibv_send_wr', {
      wr_id: 'uint64_t',
      next: 'void *',
      sg_list: 'void *',
      num_sge: 'int',
      opcode: 'int',
      send_flags: 'uint32_t',
      imm_data: 'uint32_t',
      remote_addr: 'uint64_t',
      rkey: 'uint32_t',
      // The rest of the wr union (atomic: 32 bytes), qp_type and the bind_mw/tso union.
      rest: koffi.array('uint8_t', 76),
    }),
    ibv_recv_wr: koffi.struct('ibv_recv_wr', {
      wr_id: 'uint64_t',
      next: 'void *',
      sg_list: 'void *',
      num_sge: 'int',
    }),
    ibv_qp_init_attr: koffi.struct('ibv_qp_init_attr', {
      qp_context: 'void *',
      send_cq: 'void *',
      recv_cq: 'void *',
      srq: 'void *',
      cap: qpCap,
      qp_type: 'int',
      sq_sig_all: 'int',
    }),
    ibv_qp_attr: koffi.struct('ibv_qp_attr', {
      qp_state: 'int',
      cur_qp_state: 'int',
      path_mtu: 'int',
      path_mig_state: 'int',
      qkey: 'uint32_t',
      rq_psn: 'uint32_t',
      sq_psn: 'uint32_t',
      dest_qp_num: 'uint32_t',
      qp_access_flags: 'uint32_t',
      cap: qpCap,
      ah_attr: ah,
      alt_ah_attr: ah,
      pkey_index: 'uint16_t',
      alt_pkey_index: 'uint16_t',
      en_sqd_async_notify: 'uint8_t',
      sq_draining: 'uint8_t',
      max_rd_atomic: 'uint8_t',
      max_dest_rd_atomic: 'uint8_t',
      min_rnr_timer: 'uint8_t',
      port_num: 'uint8_t',
      timeout: 'uint8_t',
      retry_cnt: 'uint8_t',
      rnr_retry: 'uint8_t',
      alt_port_num: 'uint8_t',
      alt_timeout: 'uint8_t',
      rate_limit: 'uint32_t',
    }),
    ibv_mr: koffi.struct('ibv_mr', {
      context: 'void *',
      pd: 'void *',
      addr: 'void *',
      length: 'size_t',
      handle: 'uint32_t',
      lkey: 'uint32_t',
      rkey: 'uint32_t',
    }),
    ibv_qp_head: koffi.struct('ibv_qp_head', {
      context: 'void *',
      qp_context: 'void *',
      pd: 'void *',
      send_cq: 'void *',
      recv_cq: 'void *',
      srq: 'void *',
      handle: 'uint32_t',
      qp_num: 'uint32_t',
      state: 'int',
      qp_type: 'int',
    }),
    ibv_comp_channel: koffi.struct('ibv_comp_channel', { context: 'void *', fd: 'int', refcnt: 'int' }),
  };
}

/** struct ibv_context_ops: 33 function pointers, in verbs.h's order. */
function opsFields(): Record<string, string> {
  const names = [
    '_compat_query_device',
    '_compat_query_port',
    '_compat_alloc_pd',
    '_compat_dealloc_pd',
    '_compat_reg_mr',
    '_compat_rereg_mr',
    '_compat_dereg_mr',
    'alloc_mw',
    'bind_mw',
    'dealloc_mw',
    '_compat_create_cq',
    'poll_cq',
    'req_notify_cq',
    '_compat_cq_event',
    '_compat_resize_cq',
    '_compat_destroy_cq',
    '_compat_create_srq',
    '_compat_modify_srq',
    '_compat_query_srq',
    '_compat_destroy_srq',
    'post_srq_recv',
    '_compat_create_qp',
    '_compat_query_qp',
    '_compat_modify_qp',
    '_compat_destroy_qp',
    'post_send',
    'post_recv',
    '_compat_create_ah',
    '_compat_destroy_ah',
    '_compat_attach_mcast',
    '_compat_detach_mcast',
    '_compat_async_event',
  ];
  return Object.fromEntries(names.map((n) => [n, 'void *']));
}

function deviceAttrFields(koffi: Koffi): Record<string, string | ReturnType<Koffi['array']>> {
  const ints = [
    'max_qp',
    'max_qp_wr',
    'device_cap_flags',
    'max_sge',
    'max_sge_rd',
    'max_cq',
    'max_cqe',
    'max_mr',
    'max_pd',
    'max_qp_rd_atom',
    'max_ee_rd_atom',
    'max_res_rd_atom',
    'max_qp_init_rd_atom',
    'max_ee_init_rd_atom',
    'atomic_cap',
    'max_ee',
    'max_rdd',
    'max_mw',
    'max_raw_ipv6_qp',
    'max_raw_ethy_qp',
    'max_mcast_grp',
    'max_mcast_qp_attach',
    'max_total_mcast_qp_attach',
    'max_ah',
    'max_fmr',
    'max_map_per_fmr',
    'max_srq',
    'max_srq_wr',
    'max_srq_sge',
  ];
  return {
    fw_ver: koffi.array('char', 64),
    node_guid: 'uint64_t',
    sys_image_guid: 'uint64_t',
    max_mr_size: 'uint64_t',
    page_size_cap: 'uint64_t',
    vendor_id: 'uint32_t',
    vendor_part_id: 'uint32_t',
    hw_ver: 'uint32_t',
    ...Object.fromEntries(ints.map((n) => [n, 'int'])),
    max_pkeys: 'uint16_t',
    local_ca_ack_delay: 'uint8_t',
    phys_port_cnt: 'uint8_t',
  };
}

/** Byte offset of `field` in `struct`, and a struct's size, from the koffi declarations. */
export interface Layout {
  offset(struct: string, field: string): number;
  size(struct: string): number;
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

/** The structs' layouts alone, for tests and tools that need no library. */
export function verbsLayout(): Layout {
  return makeLayout(loadKoffi(), declared());
}

let structs: Record<string, unknown> | undefined;
function declared(): Record<string, unknown> {
  structs ??= declareStructs(loadKoffi());
  return structs;
}

function loadKoffi(): Koffi {
  return createRequire(import.meta.url)('koffi') as Koffi;
}

function makeLayout(koffi: Koffi, s: Record<string, unknown>): Layout {
  const type = (name: string): Parameters<Koffi['sizeof']>[0] => {
    const t = s[name];
    if (t === undefined) throw new Error(`no layout for struct ${name}`);
    return t as Parameters<Koffi['sizeof']>[0];
  };
  return {
    offset: (struct, field) => koffi.offsetof(type(struct), field),
    size: (struct) => koffi.sizeof(type(struct)),
  };
}

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
