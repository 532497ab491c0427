import { TandemError } from '../errors/index.js';

/**
 * The link a failed step names as down: a member's communicator reported that it lost its
 * link to another rank (COLL_PEER_LOST with `reportedBy` and `rank`, the fabric's peer_lost on
 * that pair's connection). Both ranks may still be alive: a cable between two members pulled
 * while each still reaches the coordinator. `results` come in the order the members answered:
 * the first that names a pair wins, since once a step fails its ranks are aborted and their
 * peers may then report a link to an aborting rank as lost too. Returns the pair, lower rank
 * first, or undefined when no reply names one.
 */
export function brokenLink(results: readonly PromiseSettledResult<unknown>[]): [number, number] | undefined {
  for (const r of results) {
    if (r.status !== 'rejected') continue;
    const e = r.reason as unknown;
    if (!(e instanceof TandemError) || e.code !== 'COLL_PEER_LOST') continue;
    const { rank, reportedBy, left } = e.details as { rank?: unknown; reportedBy?: unknown; left?: unknown };
    // a peer that closed its communicator said goodbye over the link: the link itself worked
    if (left === true) continue;
    if (typeof rank === 'number' && typeof reportedBy === 'number' && rank !== reportedBy)
      return rank < reportedBy ? [rank, reportedBy] : [reportedBy, rank];
  }
  return undefined;
}

/** A step failed on a link between two members that are both alive (see brokenLink). */
export class LinkDownError extends TandemError {
  constructor(
    readonly ranks: [number, number],
    cause: unknown,
  ) {
    super(
      'CLUSTER_NODE_LOST',
      `the link between ranks ${ranks[0]} and ${ranks[1]} is down: ${(cause as Error).message}`,
      { hint: 'the coordinator places the model again without that link', cause },
    );
  }
}
