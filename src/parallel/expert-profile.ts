import { readFileSync, writeFileSync } from 'node:fs';
import { TandemError } from '../errors/index.js';
import type { ExpertLoad } from '../engine/model/expert-load.js';
import { balanceLayers, layerExpertSets, type ExpertPlacement } from './expert-balance.js';
import type { ExpertSets, ParallelPlan } from './plan.js';

/**
 * A mixture of experts' routing, per layer: what a placement of experts follows, measured on
 * one run and read by the next (`--expert-profile FILE`), or pulled from serving members.
 * `layers[l][e]` is expert e's share of layer l's choices (a layer sums to 1, or to 0 when
 * nothing was routed through it), from the counters' decaying window (`recent`: each layer's
 * counts halve every `halfLife` of its choices) or their totals since load.
 */
export interface ExpertProfile {
  format: typeof EXPERT_PROFILE_FORMAT;
  experts: number;
  window: 'recent' | 'totals';
  layers: number[][];
  /** Choices counted per layer since load (the weight of that layer's shares). */
  choices: number[];
}

export const EXPERT_PROFILE_FORMAT = 'tandem-expert-profile/1';

/** One rank's counters (Model.expertLoad), as a member reports them: [layer * experts + expert], layers from `layerStart`. */
export interface RankExpertCounts {
  layerStart: number;
  layers: number;
  experts: number;
  recent: number[];
  totals: number[];
}

function badProfile(message: string, details: Record<string, unknown> = {}): TandemError {
  return new TandemError('PAR_BAD_PROFILE', `expert profile: ${message}`, {
    hint: 'write the profile from a run of this model (tandem run ... --save-expert-profile FILE), or leave --expert-profile out',
    details,
  });
}

const shares = (counts: readonly number[]): number[] => {
  const sum = counts.reduce((a, b) => a + b, 0);
  return counts.map((c) => (sum > 0 ? c / sum : 0));
};

/**
 * The whole model's profile from its ranks' counters in `plan`: under expert parallel each
 * rank of a stage routes its own share of the tokens, so a stage's counts are its ranks' sum;
 * under the other splits every rank of a stage routes every token, so its first rank's count.
 */
export function profileFromRanks(
  plan: ParallelPlan,
  counts: readonly RankExpertCounts[],
  window: 'recent' | 'totals' = 'recent',
): ExpertProfile {
  const experts = counts[0]?.experts ?? 0;
  const layers = Math.max(0, ...counts.map((c) => c.layerStart + c.layers));
  const sum = Array.from({ length: layers }, () => new Array<number>(experts).fill(0));
  const total = Array.from({ length: layers }, () => new Array<number>(experts).fill(0));
  counts.forEach((c, r) => {
    if (c.experts !== experts) throw badProfile(`rank ${r} counts ${c.experts} experts, rank 0 ${experts}`);
    if (plan.kind !== 'ep' && plan.ranks[r]?.tpRank !== 0) return;
    for (let l = 0; l < c.layers; l++)
      for (let e = 0; e < experts; e++) {
        sum[c.layerStart + l]![e]! += c[window][l * experts + e] ?? 0;
        total[c.layerStart + l]![e]! += c.totals[l * experts + e] ?? 0;
      }
  });
  return {
    format: EXPERT_PROFILE_FORMAT,
    experts,
    window,
    layers: sum.map(shares),
    choices: total.map((t) => t.reduce((a, b) => a + b, 0)),
  };
}

/** A profile from one model's own counters (a single-node run). */
export function profileFromCounts(
  c: RankExpertCounts,
  window: 'recent' | 'totals' = 'recent',
): ExpertProfile {
  return profileFromRanks({ kind: 'ep', nodes: 1, stages: 1, tpSize: 1, ranks: [] }, [c], window);
}

/** A whole model's profile from its counters (Model.expertLoad); PAR_BAD_PROFILE without experts. */
export function profileOfModel(model: object): ExpertProfile {
  const load = (model as { expertLoad?: ExpertLoad }).expertLoad;
  if (!load)
    throw new TandemError('PAR_BAD_PROFILE', 'expert profile: the model has no experts to profile', {
      hint: 'profile a mixture-of-experts model, or leave the profile out',
    });
  const { layers, experts, recent, totals } = load;
  return profileFromCounts({ layerStart: 0, layers, experts, recent: [...recent], totals: [...totals] });
}

/** Checks a profile's shape (and, with `model`, that it fits the model's experts and layers). */
export function parseExpertProfile(text: string, model?: { experts: number; layers: number }): ExpertProfile {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw badProfile(`not JSON (${(e as Error).message})`);
  }
  const p = v as Partial<ExpertProfile> | null;
  if (typeof p !== 'object' || p === null || p.format !== EXPERT_PROFILE_FORMAT)
    throw badProfile(`not a ${EXPERT_PROFILE_FORMAT} document`);
  const n = p.experts;
  const rowOk = (row: unknown): boolean =>
    Array.isArray(row) && row.length === n && row.every((x) => typeof x === 'number' && x >= 0 && x <= 1);
  if (!Number.isInteger(n) || !Array.isArray(p.layers) || !p.layers.every(rowOk))
    throw badProfile('each layer must list one share in [0, 1] per expert', { experts: n });
  if (!Array.isArray(p.choices) || p.choices.length !== p.layers.length)
    throw badProfile('`choices` must give one count per layer');
  const profile = { ...(p as ExpertProfile), window: p.window === 'totals' ? 'totals' : 'recent' } as const;
  if (model) checkProfile(profile, model);
  return profile;
}

/** Throws PAR_BAD_PROFILE unless the profile covers the model's layers and experts. */
export function checkProfile(p: ExpertProfile, model: { experts: number; layers: number }): void {
  if (model.experts !== p.experts || model.layers !== p.layers.length)
    throw badProfile(
      `it covers ${p.layers.length} layers of ${p.experts} experts; the model has ${model.layers} layers of ${model.experts}`,
      { experts: p.experts, layers: p.layers.length },
    );
}

export function readExpertProfile(path: string, model?: { experts: number; layers: number }): ExpertProfile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw badProfile(`cannot read ${path}: ${(e as Error).message}`, { path });
  }
  return parseExpertProfile(text, model);
}

export function writeExpertProfile(path: string, p: ExpertProfile): void {
  writeFileSync(path, JSON.stringify(p) + '\n');
}

/** Extra experts per layer a rank may hold beyond an even split, for copies of hot ones. */
export const EXPERT_ROOM = 2;

/**
 * Each layer placed by its profile over `ranks` (balanceLayers), each rank holding at most an
 * even split plus `room` experts per layer. A layer nothing was routed through is placed by
 * the mean of the others (or evenly when none has counts).
 */
export function placeByProfile(p: ExpertProfile, ranks: number, room = EXPERT_ROOM): ExpertPlacement[] {
  const counted = p.layers.filter((l) => l.some((x) => x > 0));
  const mean = p.layers[0]!.map((_, e) =>
    counted.length > 0 ? counted.reduce((a, l) => a + l[e]!, 0) / counted.length : 1,
  );
  const loads = p.layers.map((l) => (l.some((x) => x > 0) ? l : mean));
  return balanceLayers(loads, ranks, Math.min(p.experts, Math.ceil(p.experts / ranks) + room));
}

/** The plan's expert sets for a profile (placeByProfile). */
export function expertSetsFromProfile(p: ExpertProfile, ranks: number, room = EXPERT_ROOM): ExpertSets {
  return layerExpertSets(placeByProfile(p, ranks, room));
}
