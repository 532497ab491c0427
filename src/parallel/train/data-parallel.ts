import { createCommunicator, type Communicator } from '../../collectives/index.js';
import { isTandemError, TandemError } from '../../errors/index.js';
import {
  paramLayout,
  train,
  type Checkpoint,
  type StepLog,
  type TrainConfig,
  type TrainResult,
} from '../../engine/train/index.js';
import { CollectiveGradSync, type SyncTimes } from './grad-sync.js';
import { ShardedGradSync } from './sharded-sync.js';

export interface RankOptions {
  rank: number;
  size: number;
  /** Rank 0 listens here (port 0: any free port) and the others join it. */
  rendezvous: string;
  secret: string;
  provider?: 'tcp' | 'shm';
  /**
   * Compute threads of each rank (default 1): waits busy-poll only where the host's ranks x
   * threads fit its cores (createCommunicator's threadsPerRank).
   */
  threadsPerRank?: number;
  /** Bound on every wait inside a collective (a rank computing a step must finish within it). */
  timeoutMs?: number;
  onListening?: (address: string) => void;
  /** Each update's communication time (rank-local), for the benchmark. */
  onTimes?: (times: SyncTimes) => void;
  /**
   * Ends connecting the world (the rank fails as createCommunicator does), or aborts the run's
   * communicator once connected, after which the rank stops with PAR_TRAIN_NODE_LOST: a node
   * agent whose coordinator left, a coordinator whose node failed.
   */
  signal?: AbortSignal;
  /**
   * Every rank resumes from rank 0's checkpoint (cfg.resume there), received over the
   * communicator before the first update: ranks on other machines (`--hosts`) have no copy.
   */
  resumeFromRoot?: boolean;
  /**
   * `sharded` (default): each rank clips and updates its share of the parameters, which the
   * ranks then all-gather (ShardedGradSync, ZeRO-1); `replicated`: every rank all-reduces the
   * whole gradient and updates every parameter (CollectiveGradSync). Same curve up to the
   * clipping norm's last bits (sharded-sync.ts says when).
   */
  optimizer?: OptimizerSplit;
}

export type OptimizerSplit = 'sharded' | 'replicated';

/** Elements per broadcast when the checkpoint is shared: 4 MiB of f32. */
const SHARE_CHUNK = 1 << 20;

/** Rank 0's update count, weights and both AdamW moments, on every rank (others get an empty curve). */
async function shareResume(comm: Communicator, cfg: Omit<TrainConfig, 'sync'>): Promise<Checkpoint> {
  const total = paramLayout(cfg.settings.shape).total;
  const mine = comm.rank === 0 ? cfg.resume : undefined;
  const step = Int32Array.of(mine?.step ?? 0);
  await comm.broadcast(step, 0);
  const arrays = mine ? [mine.weights, mine.m, mine.v] : [0, 1, 2].map(() => new Float32Array(total));
  for (const a of arrays)
    for (let i = 0; i < a.length; i += SHARE_CHUNK) await comm.broadcast(a.subarray(i, i + SHARE_CHUNK), 0);
  const [weights, m, v] = arrays as [Float32Array, Float32Array, Float32Array];
  return mine ?? { settings: cfg.settings, step: step[0] as number, curve: [], weights, m, v };
}

/** Collectives' codes that mean a rank is gone or stuck: the survivors stop. */
const LOST = new Set(['COLL_PEER_LOST', 'COLL_TIMEOUT', 'COLL_ABORTED']);

/**
 * One rank of a data-parallel run: connects the world, then runs the engine's training loop
 * on this rank's rows of every batch with gradients summed over ranks (CollectiveGradSync).
 * Rank 0 alone writes checkpoints. A rank that dies makes every survivor stop with
 * PAR_TRAIN_NODE_LOST, naming the last completed update; the run resumes from the last
 * checkpoint on the ranks left (the global batch, hence the curve, does not depend on the
 * number of ranks, up to the order of float sums).
 */
export async function trainRank(cfg: Omit<TrainConfig, 'sync'>, o: RankOptions): Promise<TrainResult> {
  const comm: Communicator = await createCommunicator({
    rank: o.rank,
    size: o.size,
    provider: o.provider ?? 'tcp',
    rendezvous: { kind: 'root', address: o.rendezvous },
    secret: o.secret,
    timeoutMs: o.timeoutMs ?? 60_000,
    connectTimeoutMs: 60_000,
    ...(o.threadsPerRank ? { threadsPerRank: o.threadsPerRank } : {}),
    ...(o.onListening ? { onListening: o.onListening } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  const onAbort = (): void => {
    const why: unknown = o.signal?.reason;
    comm.abort(why instanceof Error ? why.message : String(why ?? 'aborted'));
  };
  if (o.signal?.aborted) onAbort();
  o.signal?.addEventListener('abort', onAbort, { once: true });
  const fp = cfg.gemm.ops?.fingerprint;
  const sync =
    (o.optimizer ?? 'sharded') === 'sharded'
      ? new ShardedGradSync(comm, fp)
      : new CollectiveGradSync(comm, fp);
  let done = cfg.resume?.step ?? 0;
  try {
    if (o.resumeFromRoot && o.rank === 0 && !cfg.resume)
      throw new TandemError('TRAIN_CHECKPOINT', 'rank 0 was asked to share a checkpoint it does not hold', {
        hint: 'pass the checkpoint to rank 0 (--resume CKPT)',
      });
    const resume = o.resumeFromRoot ? await shareResume(comm, cfg) : cfg.resume;
    done = resume?.step ?? 0;
    return await train({
      ...cfg,
      ...(resume ? { resume } : {}),
      sync,
      onStep: (l: StepLog) => {
        done = l.step;
        o.onTimes?.(sync.last);
        cfg.onStep?.(l);
      },
    });
  } catch (e) {
    if (isTandemError(e) && LOST.has(e.code)) {
      throw new TandemError(
        'PAR_TRAIN_NODE_LOST',
        `rank ${o.rank} of ${o.size}: a node was lost after update ${done} (${e.message})`,
        {
          hint:
            cfg.checkpoint !== undefined
              ? `resume on the nodes left: tandem train --resume ${cfg.checkpoint} --nodes ${Math.max(1, o.size - 1)} (same --data)`
              : 'rerun; pass --checkpoint to be able to resume',
          cause: e,
        },
      );
    }
    throw e;
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
    await Promise.race([comm.close(), new Promise((r) => setTimeout(r, 2000).unref())]);
  }
}
