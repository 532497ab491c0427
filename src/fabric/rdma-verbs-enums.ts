/**
 * Values of rdma-core's <infiniband/verbs.h> enums that the rdma provider uses (the same on
 * Apple's librdma, which exports that API): access flags, QP types and states, opcodes, send
 * flags, and the attribute mask bits of ibv_modify_qp.
 */

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
