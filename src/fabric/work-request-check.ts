import { TandemError } from '../errors/index.js';
import type { RecvWr, SendWr } from './types.js';
import { MAX_INLINE } from './types.js';
import { isU64 } from './address-split.js';

/**
 * Shape checks of the work requests an application posts: a bad shape is the caller's bug
 * and throws FABRIC_INVALID_REQUEST at once; a well-shaped request that names bad memory
 * completes with a failed status instead (the queue pair's job).
 */

function invalid(message: string): TandemError {
  return new TandemError('FABRIC_INVALID_REQUEST', message, {
    hint: 'see src/fabric/types.ts for the work request shapes',
  });
}

export function checkRecvWr(wr: RecvWr): void {
  if (typeof wr !== 'object' || wr === null || typeof wr.wrId !== 'number' || !Array.isArray(wr.sgl)) {
    throw invalid('postRecv: expected { wrId: number, sgl: Sge[] }');
  }
}

export function checkSendWr(wr: SendWr): void {
  if (typeof wr !== 'object' || wr === null || typeof wr.wrId !== 'number' || !Array.isArray(wr.sgl)) {
    throw invalid('postSend: expected { wrId: number, opcode, sgl: Sge[] }');
  }
  const op = wr.opcode;
  if (op !== 'send' && op !== 'write' && op !== 'write_imm' && op !== 'read') {
    throw invalid(`postSend: unknown opcode '${String(op)}' (send, write, write_imm, read)`);
  }
  if (
    op !== 'send' &&
    (wr.remote === undefined || typeof wr.remote.addr !== 'bigint' || typeof wr.remote.rkey !== 'number')
  ) {
    throw invalid(`postSend: ${op} needs remote: { addr: bigint, rkey: number }`);
  }
  if (op !== 'send' && !isU64(wr.remote!.addr)) {
    throw invalid(`postSend: remote address ${wr.remote!.addr} is not a 64-bit address`);
  }
  if (
    op === 'write_imm' &&
    (!Number.isInteger(wr.imm) || (wr.imm as number) < 0 || (wr.imm as number) > 0xffffffff)
  ) {
    throw invalid(`postSend: write_imm needs imm in 0..2^32-1, got ${String(wr.imm)}`);
  }
  if (wr.inline === true) {
    if (op === 'read')
      throw invalid('postSend: a read cannot be inline (inline is for send, write and write_imm)');
    let total = 0;
    for (const sge of wr.sgl) total += sge.length;
    if (total > MAX_INLINE)
      throw invalid(
        `postSend: an inline payload of ${total} bytes is over MAX_INLINE (${MAX_INLINE}); post it without inline`,
      );
  }
}
