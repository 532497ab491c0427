import type { SamplerOptions } from '../engine/sampling/index.js';
import type { ProviderName } from '../fabric/index.js';
import { wireFormats, type ParallelPlan, type WireFormat } from '../parallel/index.js';
import type { Message } from './protocol.js';
import type { SliceSource } from './slices/slice-server.js';
import { isTrainRequest, type TrainRequest } from './node-train.js';

/**
 * The control protocol's version: the node's challenge and the coordinator's answer both
 * carry it, and a peer of another version is refused during the handshake.
 */
export const PROTOCOL_VERSION = 5;

export interface LoadRequest {
  model: string;
  plan: ParallelPlan;
  rank: number;
  provider: ProviderName;
  /** The rendezvous root (`root`, default rank 0) listens here (port 0 allowed) and reports the address; others connect to it. */
  rendezvous: string;
  /** The rank that listens at `rendezvous`: one linked directly to every other (default 0). */
  root?: number;
  /**
   * The links between ranks, as [rankA, rankB] pairs, when not every pair is linked (a link
   * went down): pairs without one are relayed through the others. Absent: a full mesh.
   */
  edges?: [number, number][];
  /** The host this node's fabric listens on (reachable by the other nodes). */
  fabricHost: string;
  wire: WireFormat;
  logits: 'full' | 'argmax';
  contextLength?: number;
  /** Sequences served at once, each with a KV cache of contextLength (default 1). */
  sequences?: number;
  timeoutMs: number;
  /** Where a member without the model (or with another file at its path) gets its slices. */
  source?: SliceSource;
}

export interface GenerateBody {
  prompt: number[];
  maxTokens: number;
  stopTokens?: number[];
  stream: boolean;
  sampling?: SamplerOptions;
  contextLength?: number;
  forced?: number[];
}

/** What a coordinator may ask of a node, each answered under its id. */
export type NodeRequest = { id: number } & (
  | { type: 'hello' }
  | { type: 'load'; load: LoadRequest }
  | { type: 'generate'; generate: GenerateBody }
  | { type: 'forward' | 'forward-batch' | 'forward-mixed'; step: Message }
  | { type: 'release'; seqs: number[] }
  | { type: 'unload' }
  | { type: 'stream'; bytes: number; ms: number }
  | { type: 'expert-load' }
  | { type: 'experts-stage'; replace: ExpertsStage }
  | { type: 'experts-switch'; replaceId: number }
  | { type: 'train'; train: TrainRequest }
);

/**
 * A new placement of the loaded model's experts (an expert-parallel plan that moves only
 * experts): the node loads its new experts beside the old ones and answers when they are
 * loaded, while its steps go on; a later `experts-switch` with the same id makes it hold them.
 */
export interface ExpertsStage {
  replaceId: number;
  plan: ParallelPlan;
}

/** What a coordinator tells a node without an answer: handled at once, beside the requests. */
export type NodeNotice = { type: 'heartbeat' } | { type: 'abort'; reason: string };

/** A message that is not one of the above: the node closes the connection and says why. */
export class MalformedMessage extends Error {}

const isInt = (v: unknown): v is number => Number.isInteger(v);
const ints = (v: unknown): v is number[] => Array.isArray(v) && v.every(isInt);

function need(ok: boolean, type: string, what: string): void {
  if (!ok) throw new MalformedMessage(`'${type}' with ${what}`);
}

function isSliceSource(v: unknown): boolean {
  const s = v as Record<string, unknown> | null;
  const stamp = (typeof s === 'object' && s !== null ? s.stamp : null) as Record<string, unknown> | null;
  return (
    typeof s === 'object' &&
    s !== null &&
    typeof s.address === 'string' &&
    isInt(s.size) &&
    typeof s.headerSha256 === 'string' &&
    typeof stamp === 'object' &&
    stamp !== null &&
    typeof stamp.host === 'string' &&
    ['dev', 'ino', 'size', 'mtimeMs'].every((k) => typeof stamp[k] === 'number')
  );
}

/**
 * Checks an authenticated coordinator's message once, at the edge, into a typed request or
 * notice. The fields each request's handler relies on are checked here; what needs the loaded
 * model (token ids against its vocabulary) is checked by the handler.
 */
export function parseNodeMessage(m: Message): NodeRequest | NodeNotice {
  const type = typeof m.type === 'string' ? m.type : '';
  if (type === 'heartbeat') return { type };
  if (type === 'abort') return { type, reason: typeof m.reason === 'string' ? m.reason : 'a peer was lost' };
  need(isInt(m.id), type || '(no type)', 'no integer id');
  const id = m.id as number;
  switch (type) {
    case 'hello':
    case 'unload':
    case 'expert-load':
      return { type, id };
    case 'experts-stage': {
      const plan = m.plan as { ranks?: unknown; nodes?: unknown; kind?: unknown } | null;
      need(isInt(m.replaceId), type, 'no integer replaceId');
      need(
        typeof plan === 'object' &&
          plan !== null &&
          plan.kind === 'ep' &&
          Array.isArray(plan.ranks) &&
          isInt(plan.nodes),
        type,
        'no expert-parallel plan',
      );
      return { type, id, replace: { replaceId: m.replaceId as number, plan: m.plan as ParallelPlan } };
    }
    case 'experts-switch':
      need(isInt(m.replaceId), type, 'no integer replaceId');
      return { type, id, replaceId: m.replaceId as number };
    case 'load': {
      const plan = m.plan as { ranks?: unknown; nodes?: unknown } | null;
      need(typeof m.model === 'string' && m.model !== '', type, 'no model path');
      need(
        typeof plan === 'object' && plan !== null && Array.isArray(plan.ranks) && isInt(plan.nodes),
        type,
        'no plan',
      );
      need(isInt(m.rank) && (m.rank as number) >= 0, type, 'no rank');
      need(
        m.provider === 'shm' || m.provider === 'tcp' || m.provider === 'rdma' || m.provider === 'loopback',
        type,
        'an unknown provider',
      );
      need(
        typeof m.rendezvous === 'string' && typeof m.fabricHost === 'string',
        type,
        'no rendezvous address',
      );
      need(wireFormats.includes(m.wire as WireFormat), type, 'an unknown wire format');
      need(m.logits === 'full' || m.logits === 'argmax', type, 'an unknown logits mode');
      need(
        m.contextLength === undefined || (isInt(m.contextLength) && (m.contextLength as number) > 0),
        type,
        'a bad context length',
      );
      need(
        m.sequences === undefined || (isInt(m.sequences) && (m.sequences as number) > 0),
        type,
        'a bad sequence count',
      );
      need(typeof m.timeoutMs === 'number' && m.timeoutMs > 0, type, 'no timeout');
      need(m.source === undefined || isSliceSource(m.source), type, 'a bad slice source');
      need(m.root === undefined || isInt(m.root), type, 'a bad rendezvous root');
      need(
        m.edges === undefined ||
          (Array.isArray(m.edges) && m.edges.every((e) => ints(e) && (e as number[]).length === 2)),
        type,
        'bad edges',
      );
      return { type, id, load: m as unknown as LoadRequest };
    }
    case 'generate':
      need(ints(m.prompt) && (m.prompt as number[]).length > 0, type, 'no prompt token ids');
      need(isInt(m.maxTokens), type, 'no integer maxTokens');
      need(m.stopTokens === undefined || ints(m.stopTokens), type, 'bad stop tokens');
      need(m.forced === undefined || ints(m.forced), type, 'bad forced tokens');
      need(
        m.sampling === undefined || (typeof m.sampling === 'object' && m.sampling !== null),
        type,
        'bad sampling',
      );
      need(m.contextLength === undefined || isInt(m.contextLength), type, 'a bad context length');
      return {
        type,
        id,
        generate: {
          prompt: m.prompt as number[],
          maxTokens: m.maxTokens as number,
          stream: m.stream === true,
          ...(m.stopTokens !== undefined ? { stopTokens: m.stopTokens as number[] } : {}),
          ...(m.forced !== undefined ? { forced: m.forced as number[] } : {}),
          ...(m.sampling !== undefined ? { sampling: m.sampling as SamplerOptions } : {}),
          ...(m.contextLength !== undefined ? { contextLength: m.contextLength as number } : {}),
        },
      };
    case 'forward':
    case 'forward-batch':
      need(ints(m.seqs) && ints(m.tokens), type, 'no sequence ids or tokens');
      return { type, id, step: m };
    case 'forward-mixed': {
      const part = (v: unknown): Record<string, unknown> | null =>
        typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : null;
      const prefill = part(m.prefill);
      const decode = part(m.decode);
      need(
        isInt(prefill?.seq) && ints(prefill?.tokens) && ints(decode?.seqs) && ints(decode?.tokens),
        type,
        'no prompt piece or no decode rows',
      );
      need(typeof m.onePass === 'boolean', type, 'no onePass flag');
      return { type, id, step: m };
    }
    case 'release':
      need(ints(m.seqs), type, 'no sequence ids');
      return { type, id, seqs: m.seqs as number[] };
    case 'stream':
      need(typeof m.bytes === 'number' && typeof m.ms === 'number', type, 'no bytes or ms');
      return { type, id, bytes: m.bytes as number, ms: m.ms as number };
    case 'train':
      need(isTrainRequest(m), type, 'bad training fields');
      return { type, id, train: m as unknown as TrainRequest };
    default:
      throw new MalformedMessage(`an unknown request '${type}'`);
  }
}
