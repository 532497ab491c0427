import type { Socket } from 'node:net';
import { TandemError } from '../errors/index.js';
import type { ModelFile } from '../engine/model/model-file.js';
import { RankExperts, type LoadedRank } from '../parallel/index.js';
import type { ExpertsStage, LoadRequest } from './control-messages.js';
import { errorToJson, send, type Message } from './protocol.js';

/**
 * A node's side of its loaded model's experts: the counters a coordinator pulls
 * (`expert-load`), and new placements loaded beside the old (`experts-stage`) then switched
 * between two steps (`experts-switch`); see src/cluster/expert-rebalance.ts.
 */
export class NodeExperts {
  private readonly rank: RankExperts;

  constructor(
    loaded: LoadedRank,
    file: ModelFile,
    private readonly load: LoadRequest,
    private readonly memLimit: number | undefined,
  ) {
    this.rank = new RankExperts(loaded, file);
  }

  counts(): Message {
    const counts = this.rank.counts();
    return counts ? { counts: { ...counts } } : {};
  }

  /** Loads this node's experts of a new placement beside those it holds (memory-checked). */
  async stage(s: ExpertsStage): Promise<Message> {
    const started = Date.now();
    const { loaded, peakBytes } = await this.rank.stage(s.replaceId, s.plan, {
      provider: this.load.provider,
      ...(this.memLimit !== undefined ? { memLimit: this.memLimit } : {}),
      ...(this.load.contextLength ? { contextLength: this.load.contextLength } : {}),
      ...(this.load.sequences ? { sequences: this.load.sequences } : {}),
    });
    return { loaded, peakBytes, stageMs: Date.now() - started };
  }

  /** Holds the staged placement from the next step on (a queued request: between two steps). */
  switch(replaceId: number): Message {
    const started = Date.now();
    const { dropped } = this.rank.switch(replaceId);
    return { dropped, switchMs: Date.now() - started };
  }
}

/** An expert request with no model loaded. */
export function noExperts(): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', 'an expert request before load', { hint: 'load a model first' });
}

/**
 * Runs an `experts-stage` request beside the node's request queue, so the steps queued while
 * the new experts load go on, and answers it when they are loaded. A failure leaves the
 * placement in use as it was, so unlike a queued request's it aborts nothing.
 */
export function stageBesideQueue(
  socket: Socket,
  request: { id: number; replace: ExpertsStage },
  experts: () => NodeExperts | undefined,
  log?: (line: string) => void,
): void {
  const run = async (): Promise<Message> => {
    const ex = experts();
    if (!ex) throw noExperts();
    return ex.stage(request.replace);
  };
  void run().then(
    (result) => send(socket, { id: request.id, ok: true, result }),
    (e: unknown) => {
      log?.(`request 'experts-stage' failed: ${(e as Error).message}`);
      send(socket, { id: request.id, ok: false, error: errorToJson(e) });
    },
  );
}
