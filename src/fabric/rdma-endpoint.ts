import { TandemError } from '../errors/index.js';
import type { QpEndpoint, QpType } from './rdma-resources.js';

/**
 * What two rdma devices exchange over the authenticated side channel to connect one queue
 * pair, written and read here only: the queue pair's type and number, its first PSN (random
 * 24-bit), the GID chosen for the peer and the port's MTU (verbs' enum). Addresses and rkeys
 * of regions travel in the application's own messages (`info`, SEND payloads), as on every
 * provider. A peer's setup is validated once, on arrival; anything out of range ends the setup
 * with a typed error.
 */
export interface RdmaSetup extends QpEndpoint {
  qpType: QpType;
}

export function encodeSetup(s: RdmaSetup): Record<string, unknown> {
  return {
    qpType: s.qpType,
    qpNum: s.qpNum,
    psn: s.psn,
    gid: Buffer.from(s.gid).toString('hex'),
    mtu: s.mtu,
  };
}

function setupError(peer: string, what: string): TandemError {
  return new TandemError('FABRIC_CONNECT_FAILED', `rdma setup from ${peer} is unusable: ${what}`, {
    hint: 'run the same tandem version with --provider rdma on both ends (tandem devinfo shows each port)',
  });
}

const u24 = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) < 1 << 24;

/** The peer's setup, checked against ours (same queue pair type). */
export function decodeSetup(extra: Record<string, unknown>, ourType: QpType, peer: string): RdmaSetup {
  const { qpType, qpNum, psn, gid, mtu } = extra;
  if (qpType !== 'rc' && qpType !== 'uc') throw setupError(peer, `queue pair type ${String(qpType)}`);
  if (qpType !== ourType) {
    throw new TandemError(
      'FABRIC_CONNECT_FAILED',
      `the peer ${peer} uses ${qpType.toUpperCase()} queue pairs, this side ${ourType.toUpperCase()}`,
      { hint: 'give both ends the same TANDEM_RDMA_QP (rc where both devices offer it, else uc)' },
    );
  }
  if (!u24(qpNum) || qpNum === 0) throw setupError(peer, `queue pair number ${String(qpNum)}`);
  if (!u24(psn)) throw setupError(peer, `PSN ${String(psn)} is not 24-bit`);
  if (typeof gid !== 'string' || !/^[0-9a-f]{32}$/.test(gid)) throw setupError(peer, 'GID is not 16 bytes');
  if (!Number.isInteger(mtu) || (mtu as number) < 1 || (mtu as number) > 5)
    throw setupError(peer, `MTU enum ${String(mtu)} is not 1..5 (256..4096 bytes)`);
  return { qpType, qpNum, psn, gid: new Uint8Array(Buffer.from(gid, 'hex')), mtu: mtu as number };
}
