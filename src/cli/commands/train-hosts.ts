import { isTandemError, TandemError } from '../../errors/index.js';
import { loadHostfile } from '../../cluster/index.js';
import { busyLine, ControlClient } from '../../cluster/protocol.js';
import { encodeTokens, MAX_TRAIN_TOKENS, type TrainRequest } from '../../cluster/node-train.js';
import type { TrainConfig, TrainResult } from '../../engine/train/index.js';
import type { GemmKind } from '../../kernels/backward/load-gemm.js';
import { trainRank } from '../../parallel/train/index.js';

export interface HostsRun {
  hostfile: string;
  secret: string;
  kernels: GemmKind;
  threads: number;
  /** Bound on every wait inside a collective: a rank's longest update must fit in it. */
  timeoutMs?: number;
  /** Lines on the run's progress before the first update (a node busy with another coordinator). */
  onProgress?: (line: string) => void;
}

/** How long the handshake with each node may take. */
const CONNECT_MS = 10_000;

/**
 * `tandem train --hosts FILE`: this process is rank 0 (it alone prints, checkpoints and writes
 * the GGUF) and each node of the hostfile, a `tandem node` agent, is one more rank (the
 * hostfile's order is rank order from 1): each gets the run's settings and tokens in a
 * `train` request over its authenticated control connection, and joins rank 0's
 * communicator over TCP at the address this host reaches it from. A resumed run (cfg.resume)
 * sends the checkpoint's weights and moments to the nodes over that communicator.
 */
export async function trainOnHosts(cfg: TrainConfig, o: HostsRun): Promise<TrainResult> {
  const { entries } = loadHostfile(o.hostfile);
  const size = entries.length + 1;
  const s = cfg.settings;
  if (size > s.batch)
    throw new TandemError(
      'TRAIN_OPTIONS',
      `train: --hosts gives ${size} ranks (this process and ${entries.length} nodes), more than --batch ${s.batch} rows`,
      { hint: 'give every rank at least one row: raise --batch or list fewer nodes' },
    );
  if (cfg.tokens.length > MAX_TRAIN_TOKENS)
    throw new TandemError(
      'TRAIN_DATA',
      `train: --hosts sends the data to every node, and ${cfg.tokens.length} tokens are more than the ${MAX_TRAIN_TOKENS} one request carries`,
      { hint: 'train on less text, or with --nodes on one machine' },
    );
  const clients = await Promise.all(
    entries.map((e, i) =>
      ControlClient.connect(e.address, o.secret, `node ${i + 1}`, CONNECT_MS, undefined, (b) =>
        o.onProgress?.(busyLine(b, CONNECT_MS)),
      ),
    ),
  );
  const timeoutMs = o.timeoutMs ?? 60_000;
  const tokens = encodeTokens(cfg.tokens);
  const answers: Promise<unknown>[] = [];
  // a node that fails (before joining, or mid-run) ends rank 0's wait at once, with its words
  const nodeFailed = new AbortController();
  try {
    const host = clients[0]?.localAddress ?? '127.0.0.1';
    const result = await trainRank(cfg, {
      rank: 0,
      size,
      rendezvous: `${host.includes(':') ? `[${host}]` : host}:0`,
      secret: o.secret,
      provider: 'tcp',
      timeoutMs,
      resumeFromRoot: cfg.resume !== undefined,
      signal: nodeFailed.signal,
      onListening: (address) => {
        clients.forEach((c, i) => {
          const body: TrainRequest = {
            rank: i + 1,
            size,
            rendezvous: address,
            provider: 'tcp',
            settings: s,
            tokens,
            kernels: o.kernels,
            threads: o.threads,
            timeoutMs,
            ...(cfg.resume ? { resume: true } : {}),
            ...(cfg.stopAfter !== undefined ? { stopAfter: cfg.stopAfter } : {}),
          };
          // a node that fails says why here
          const answer = c.request('train', { ...body }, 7 * 24 * 3600_000);
          answer.catch((e: unknown) => nodeFailed.abort(e));
          answers.push(answer);
        });
      },
    });
    // every node ends its rank after the last update; its answer follows within moments
    await Promise.race([Promise.allSettled(answers), new Promise((r) => setTimeout(r, 10_000).unref())]);
    return result;
  } catch (e) {
    // rank 0 stopped because a node failed before the run was under way: the node's error is the cause
    if (nodeFailed.signal.aborted && !isTandemError(e, 'PAR_TRAIN_NODE_LOST')) throw nodeFailed.signal.reason;
    throw await withNodesWords(e, answers);
  } finally {
    for (const c of clients) c.close();
  }
}

/** How long a failed run waits for the nodes' own errors before it reports without them. */
const NODE_WORDS_MS = 3000;

/**
 * Rank 0's failure with what the nodes that failed said of themselves: rank 0 sees only that
 * a link went down, where the node's answer names why (its data, its kernels, its own error).
 */
async function withNodesWords(e: unknown, answers: readonly Promise<unknown>[]): Promise<unknown> {
  if (!isTandemError(e) || answers.length === 0) return e;
  const settled = await Promise.race([
    Promise.allSettled(answers),
    new Promise<undefined>((r) => setTimeout(() => r(undefined), NODE_WORDS_MS).unref()),
  ]);
  const words = (settled ?? [])
    .map((s) => (s.status === 'rejected' ? String((s.reason as Error)?.message ?? s.reason) : ''))
    .filter((w) => w !== '');
  if (words.length === 0) return e;
  return new TandemError(e.code, `${e.message}; the nodes said: ${words.join('; ')}`, {
    hint: e.hint,
    details: { ...e.details, nodes: words },
    cause: e,
  });
}
