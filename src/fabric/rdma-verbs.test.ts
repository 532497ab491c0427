import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadVerbs, verbsInstallHint, verbsLibraryName, verbsProblem } from './rdma-verbs.js';
import { verbsLayout } from './rdma-verbs-structs.js';

// Offsets and sizes printed by a C program compiled against rdma-core 44's
// <infiniband/verbs.h> (libibverbs-dev, Debian 12, x86_64) with offsetof/sizeof.
const C_LAYOUT: Record<string, number> = {
  'ibv_context.ops': 8,
  'ibv_context_ops.poll_cq': 88,
  'ibv_context_ops.req_notify_cq': 96,
  'ibv_context_ops.post_send': 200,
  'ibv_context_ops.post_recv': 208,
  ibv_port_attr: 52,
  'ibv_port_attr.active_mtu': 8,
  'ibv_port_attr.gid_tbl_len': 12,
  'ibv_port_attr.lid': 34,
  'ibv_port_attr.link_layer': 46,
  ibv_wc: 48,
  'ibv_wc.status': 8,
  'ibv_wc.opcode': 12,
  'ibv_wc.byte_len': 20,
  'ibv_wc.imm_data': 24,
  'ibv_wc.qp_num': 28,
  'ibv_wc.wc_flags': 36,
  ibv_sge: 16,
  ibv_send_wr: 128,
  'ibv_send_wr.sg_list': 16,
  'ibv_send_wr.num_sge': 24,
  'ibv_send_wr.opcode': 28,
  'ibv_send_wr.send_flags': 32,
  'ibv_send_wr.imm_data': 36,
  'ibv_send_wr.remote_addr': 40,
  'ibv_send_wr.rkey': 48,
  ibv_recv_wr: 32,
  ibv_qp_init_attr: 64,
  'ibv_qp_init_attr.cap': 32,
  'ibv_qp_init_attr.qp_type': 52,
  'ibv_qp_init_attr.sq_sig_all': 56,
  ibv_qp_attr: 144,
  'ibv_qp_attr.path_mtu': 8,
  'ibv_qp_attr.rq_psn': 20,
  'ibv_qp_attr.dest_qp_num': 28,
  'ibv_qp_attr.qp_access_flags': 32,
  'ibv_qp_attr.cap': 36,
  'ibv_qp_attr.ah_attr': 56,
  'ibv_qp_attr.pkey_index': 120,
  'ibv_qp_attr.max_rd_atomic': 126,
  'ibv_qp_attr.max_dest_rd_atomic': 127,
  'ibv_qp_attr.min_rnr_timer': 128,
  'ibv_qp_attr.port_num': 129,
  'ibv_qp_attr.timeout': 130,
  'ibv_qp_attr.retry_cnt': 131,
  'ibv_qp_attr.rnr_retry': 132,
  'ibv_qp_attr.rate_limit': 136,
  ibv_ah_attr: 32,
  'ibv_ah_attr.dlid': 24,
  'ibv_ah_attr.is_global': 29,
  'ibv_ah_attr.port_num': 30,
  ibv_global_route: 24,
  'ibv_global_route.sgid_index': 20,
  'ibv_global_route.hop_limit': 21,
  ibv_mr: 48,
  'ibv_mr.lkey': 36,
  'ibv_mr.rkey': 40,
  'ibv_qp_head.qp_num': 52,
  'ibv_qp_head.state': 56,
  'ibv_comp_channel.fd': 8,
  ibv_device_attr: 232,
  'ibv_device_attr.max_qp_wr': 112,
  'ibv_device_attr.max_sge': 120,
  'ibv_device_attr.max_cqe': 132,
  'ibv_device_attr.max_mr': 136,
  'ibv_device_attr.max_qp_rd_atom': 144,
  'ibv_device_attr.phys_port_cnt': 227,
};

test('rdma verbs: the koffi struct layouts match verbs.h (offsets and sizes), no device needed', () => {
  const layout = verbsLayout();
  for (const [key, expected] of Object.entries(C_LAYOUT)) {
    const [struct, field] = key.split('.') as [string, string | undefined];
    const got = field === undefined ? layout.size(struct) : layout.offset(struct, field);
    assert.equal(got, expected, key);
  }
});

test('rdma verbs: one library name per platform, and a hint where it is missing', () => {
  assert.equal(verbsLibraryName('linux'), 'libibverbs.so.1');
  assert.equal(verbsLibraryName('darwin'), 'librdma.dylib');
  assert.equal(verbsLibraryName('win32'), undefined);
  assert.match(verbsInstallHint('darwin'), /rdma_ctl enable/);
  assert.match(verbsInstallHint('linux'), /libibverbs1/);
});

test('rdma verbs: the library loads with every symbol, or says why it cannot', () => {
  const verbs = loadVerbs();
  const problem = verbsProblem();
  if (verbs === undefined) {
    assert.ok(problem !== undefined && problem.length > 0);
    assert.match(problem, /not found|koffi|lacks|no RDMA/);
    return;
  }
  assert.equal(problem, undefined);
  assert.equal(verbs.library, verbsLibraryName());
  for (const name of ['ibv_open_device', 'ibv_reg_mr', 'ibv_create_qp', 'ibv_modify_qp', 'ibv_get_cq_event'])
    assert.equal(typeof (verbs.fn as unknown as Record<string, unknown>)[name], 'function', name);
  const bytes = new Uint8Array(64);
  const a = verbs.addressOf(bytes);
  assert.ok(a > 0n);
  assert.equal(verbs.addressOf(bytes.subarray(16)), a + 16n);
  // No device here (or none the caller may open): the list is NULL or empty, never a crash.
  const num = [0];
  const list = verbs.fn.ibv_get_device_list(num);
  if (list !== 0n) verbs.fn.ibv_free_device_list(list);
  assert.ok((num[0] ?? 0) >= 0);
});
