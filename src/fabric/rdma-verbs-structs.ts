import { createRequire } from 'node:module';

/**
 * The C layouts of the verbs structs the rdma provider reads and writes, declared once for
 * koffi: rdma-core's <infiniband/verbs.h> on LP64 (x86_64, arm64). Offsets and sizes are read
 * from these declarations (`Layout`); rdma-verbs.test.ts checks them against offsets compiled
 * from that header, and needs no device or library.
 */

export type Koffi = typeof import('koffi');

/** Byte offset of `field` in `struct`, and a struct's size, from the koffi declarations. */
export interface Layout {
  offset(struct: string, field: string): number;
  size(struct: string): number;
}

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

/** The structs' layouts alone, for tests and tools that need no library. */
export function verbsLayout(): Layout {
  return makeLayout(loadKoffi(), declared());
}

let structs: Record<string, unknown> | undefined;
/** The declarations, made once per process and shared by every layout. */
export function declared(): Record<string, unknown> {
  structs ??= declareStructs(loadKoffi());
  return structs;
}

export function loadKoffi(): Koffi {
  return createRequire(import.meta.url)('koffi') as Koffi;
}

export function makeLayout(koffi: Koffi, s: Record<string, unknown>): Layout {
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
