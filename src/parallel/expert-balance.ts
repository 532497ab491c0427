import { TandemError } from '../errors/index.js';

/**
 * Where each routed expert lives: `copies[e]` the ranks holding expert e (ascending, at
 * least one), `perRank[r]` the experts rank r holds (ascending). A token routed to e goes to
 * one copy (`copyFor`), so each copy carries an equal share of e's tokens.
 */
export interface ExpertPlacement {
  copies: number[][];
  perRank: number[][];
  /** The expected share of routed tokens each rank runs (sums to 1). */
  rankShares: number[];
}

function badBalance(message: string, details: Record<string, unknown>): TandemError {
  return new TandemError('PAR_BAD_PLAN', `expert placement: ${message}`, {
    hint: 'give each node room for more experts (--mem-limit), or use fewer nodes',
    details,
  });
}

/** Experts by id in contiguous ranges, as tensor-parallel ranks hold them: the static placement. */
export function contiguousExperts(loads: readonly number[], ranks: number): ExpertPlacement {
  const n = loads.length;
  const perRank = Array.from({ length: ranks }, (_, r) =>
    Array.from(
      { length: Math.ceil((n * (r + 1)) / ranks) - Math.ceil((n * r) / ranks) },
      (_, i) => Math.ceil((n * r) / ranks) + i,
    ),
  );
  return placementOf(loads, perRank);
}

/** The placement `perRank` (each rank's experts) with each rank's share of routed work under `loads`. */
export function placementOf(
  loads: readonly number[],
  perRank: readonly (readonly number[])[],
): ExpertPlacement {
  const copies = loads.map(() => [] as number[]);
  perRank.forEach((experts, r) => experts.forEach((e) => copies[e]!.push(r)));
  const total = loads.reduce((a, b) => a + b, 0) || 1;
  const rankShares = perRank.map((experts) =>
    experts.reduce((a, e) => a + loads[e]! / copies[e]!.length / total, 0),
  );
  return { copies, perRank: perRank.map((p) => [...p].sort((a, b) => a - b)), rankShares };
}

/**
 * Places experts by their measured load (tokens routed to each, any scale): an expert whose
 * load exceeds a rank's fair share gets copies (ceil(load / fair share) of them, at most one
 * per rank, as room allows), then every copy, heaviest first, goes to the rank with the least
 * load so far that has room and does not hold that expert yet (ties: the lower rank). Each
 * rank holds at most `capacity` experts; every expert is held at least once.
 */
export function balanceExperts(loads: readonly number[], ranks: number, capacity: number): ExpertPlacement {
  const n = loads.length;
  if (ranks < 1 || !Number.isInteger(ranks)) throw badBalance(`${ranks} ranks`, { ranks });
  if (capacity * ranks < n)
    throw badBalance(`${ranks} ranks holding ${capacity} experts each cannot hold ${n} experts`, {
      ranks,
      capacity,
      experts: n,
    });
  if (loads.some((l) => !(l >= 0))) throw badBalance('loads must be non-negative numbers', {});
  const total = loads.reduce((a, b) => a + b, 0);
  const fair = total / ranks;
  const replicas = loads.map((l) => (fair > 0 ? Math.min(ranks, Math.max(1, Math.ceil(l / fair))) : 1));
  // fewer copies, coldest experts' extras first, until every copy has room
  let spare = capacity * ranks - replicas.reduce((a, b) => a + b, 0);
  const byLoad = [...loads.keys()].sort((a, b) => loads[a]! - loads[b]! || a - b);
  for (let i = 0; spare < 0 && i < byLoad.length * ranks; i++) {
    const e = byLoad[i % byLoad.length]!;
    if (replicas[e]! > 1) {
      replicas[e]!--;
      spare++;
    }
  }
  const pieces: { e: number; size: number }[] = [];
  loads.forEach((l, e) => {
    for (let c = 0; c < replicas[e]!; c++) pieces.push({ e, size: l / replicas[e]! });
  });
  pieces.sort((a, b) => b.size - a.size || a.e - b.e);
  const load = new Array<number>(ranks).fill(0);
  const perRank = Array.from({ length: ranks }, () => [] as number[]);
  for (const p of pieces) {
    let best = -1;
    for (let r = 0; r < ranks; r++) {
      if (perRank[r]!.length >= capacity || perRank[r]!.includes(p.e)) continue;
      if (best < 0 || load[r]! < load[best]!) best = r;
    }
    if (best < 0) throw badBalance(`no rank has room for a copy of expert ${p.e}`, { expert: p.e, capacity });
    perRank[best]!.push(p.e);
    load[best]! += p.size;
  }
  return placementOf(loads, perRank);
}

/**
 * The copy of `expert` that token `token` (its index in the step's batch, the same on every
 * rank) goes to: round robin over the copies, so each carries an equal share of the expert's
 * tokens and every rank computes the same choice without talking.
 */
export function copyFor(p: ExpertPlacement, expert: number, token: number): number {
  const copies = p.copies[expert]!;
  return copies[token % copies.length]!;
}

/** The busiest rank's share of routed work over the mean share (1 is perfect balance). */
export function maxNodeShare(p: ExpertPlacement): number {
  const mean = 1 / p.rankShares.length;
  return Math.max(...p.rankShares) / mean;
}

/**
 * Each layer's experts placed by that layer's own load (`loads[layer][expert]`): the hot
 * experts of a real model differ by layer, and deeper layers drift from the shallow ones.
 * Each rank holds at most `capacity` experts per layer, so its memory for experts is that of
 * `capacity` experts in every layer.
 */
export function balanceLayers(
  loads: readonly (readonly number[])[],
  ranks: number,
  capacity: number,
): ExpertPlacement[] {
  return loads.map((l) => balanceExperts(l, ranks, capacity));
}

/** The static placement in every layer (contiguous id ranges), with each layer's shares. */
export function contiguousLayers(loads: readonly (readonly number[])[], ranks: number): ExpertPlacement[] {
  return loads.map((l) => contiguousExperts(l, ranks));
}

/** The plan's expert sets for per-layer placements (`layers[layer][rank]`). */
export function layerExpertSets(layers: readonly ExpertPlacement[]): {
  layers: readonly (readonly number[])[][];
} {
  return { layers: layers.map((p) => p.perRank) };
}

/**
 * The busiest rank's share over the mean, averaged over the layers: each MoE layer waits for
 * its own busiest rank, and every token passes every layer, so a step's expert time follows
 * the sum of the layers' maxima.
 */
export function layersMaxNodeShare(layers: readonly ExpertPlacement[]): number {
  return layers.reduce((a, p) => a + maxNodeShare(p), 0) / Math.max(1, layers.length);
}

/** Copies beyond one per expert, summed over the layers. */
export function layerReplicas(layers: readonly ExpertPlacement[]): number {
  return layers.reduce((a, p) => a + p.perRank.flat().length - p.copies.length, 0);
}
