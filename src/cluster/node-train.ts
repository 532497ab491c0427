import { TandemError } from '../errors/index.js';
import { hashTokens, type RunSettings } from '../engine/train/index.js';
import { gemmKinds, loadGemm, type GemmKind } from '../kernels/backward/load-gemm.js';
import { trainRank } from '../parallel/train/index.js';
import type { Message } from './protocol.js';

/**
 * `tandem train --hosts`: what the coordinator (rank 0, which alone checkpoints and writes the
 * GGUF) asks of each hostfile node, and how a node agent runs it: one data-parallel rank of
 * the run, in the agent's process, on the tokens the request carries (the node needs no copy
 * of the data), joining rank 0's communicator at `rendezvous`.
 */
export interface TrainRequest {
  rank: number;
  size: number;
  rendezvous: string;
  provider: 'tcp';
  settings: RunSettings;
  /** The tokenized data as little-endian i32, base64. */
  tokens: string;
  kernels: GemmKind;
  threads: number;
  timeoutMs: number;
  /** Resume from rank 0's checkpoint, which it sends over the communicator (`--resume` with `--hosts`). */
  resume?: boolean;
  /** Stop after this many updates of this invocation, as rank 0 does (`--stop-after`). */
  stopAfter?: number;
}

/**
 * Most tokens one request carries: base64 of 4 bytes a token stays under the control
 * protocol's 16 MiB line.
 */
export const MAX_TRAIN_TOKENS = 3_000_000;

export function encodeTokens(tokens: Int32Array): string {
  return Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength).toString('base64');
}

function decodeTokens(text: string): Int32Array {
  const bytes = Buffer.from(text, 'base64');
  const out = new Int32Array(bytes.length >> 2);
  new Uint8Array(out.buffer).set(bytes.subarray(0, out.length * 4));
  return out;
}

/** Whether a control message's fields make a train request (checked at the node's edge). */
export function isTrainRequest(m: Message): boolean {
  const s = m.settings as Partial<RunSettings> | null;
  const int = (v: unknown): boolean => Number.isInteger(v);
  return (
    int(m.rank) &&
    int(m.size) &&
    (m.rank as number) >= 1 &&
    (m.rank as number) < (m.size as number) &&
    typeof m.rendezvous === 'string' &&
    m.provider === 'tcp' &&
    typeof m.tokens === 'string' &&
    gemmKinds.includes(m.kernels as GemmKind) &&
    int(m.threads) &&
    (m.threads as number) >= 1 &&
    typeof m.timeoutMs === 'number' &&
    (m.resume === undefined || typeof m.resume === 'boolean') &&
    (m.stopAfter === undefined || (int(m.stopAfter) && (m.stopAfter as number) >= 1)) &&
    typeof s === 'object' &&
    s !== null &&
    typeof s.shape === 'object' &&
    int(s.batch) &&
    int(s.seq) &&
    int(s.steps) &&
    typeof s.dataHash === 'string'
  );
}

/** Runs this node's rank to the end of the run; `signal` aborts it (the coordinator left). */
export async function trainOnNode(
  r: TrainRequest,
  secret: string,
  signal: AbortSignal,
  log?: (line: string) => void,
): Promise<Message> {
  const tokens = decodeTokens(r.tokens);
  if (tokens.length !== r.settings.dataTokens || hashTokens(tokens) !== r.settings.dataHash)
    throw new TandemError(
      'TRAIN_DATA',
      `rank ${r.rank}: the tokens received do not match the run's data hash`,
      {
        hint: 'run the same tandem version on the coordinator and the nodes',
      },
    );
  const gemm = await loadGemm(r.kernels, r.threads, (why) => log?.(`train: ${why}`));
  log?.(
    `train: rank ${r.rank} of ${r.size}, ${r.settings.steps} updates${r.resume ? " (resuming from rank 0's checkpoint)" : ''}, joining ${r.rendezvous}`,
  );
  const result = await trainRank(
    { settings: r.settings, tokens, gemm, ...(r.stopAfter !== undefined ? { stopAfter: r.stopAfter } : {}) },
    {
      rank: r.rank,
      size: r.size,
      rendezvous: r.rendezvous,
      secret,
      provider: r.provider,
      timeoutMs: r.timeoutMs,
      signal,
      resumeFromRoot: r.resume === true,
    },
  );
  return { step: result.step, finalLoss: result.finalLoss };
}
