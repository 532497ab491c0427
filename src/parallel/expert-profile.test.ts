import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isTandemError } from '../errors/index.js';
import { layersMaxNodeShare } from './expert-balance.js';
import {
  EXPERT_PROFILE_FORMAT,
  parseExpertProfile,
  placeByProfile,
  profileFromRanks,
  readExpertProfile,
  writeExpertProfile,
  type RankExpertCounts,
} from './expert-profile.js';
import type { ParallelPlan } from './plan.js';

/** Counters of 2 layers of 4 experts, [layer * 4 + expert]. */
function counts(recent: number[], totals = recent): RankExpertCounts {
  return { layerStart: 0, layers: 2, experts: 4, recent, totals };
}

const planOf = (kind: ParallelPlan['kind']): ParallelPlan => ({
  kind,
  nodes: 2,
  stages: 1,
  tpSize: 2,
  ranks: [0, 1].map((r) => ({ rank: r, stage: 0, tpRank: r, shard: {} as never })),
});

test("expert parallel: the stage's counts are its ranks' sum (each routes its share); tensor parallel: its first rank's (each routes every token)", () => {
  const a = counts([6, 2, 0, 0, 0, 0, 4, 4]);
  const b = counts([2, 0, 0, 0, 0, 0, 0, 0], [3, 1, 0, 0, 0, 0, 0, 0]);
  const ep = profileFromRanks(planOf('ep'), [a, b]);
  assert.deepEqual(ep.layers, [
    [0.8, 0.2, 0, 0],
    [0, 0, 0.5, 0.5],
  ]);
  assert.deepEqual(ep.choices, [12, 8], 'the totals, not the window');
  const tp = profileFromRanks(planOf('tp'), [a, b]);
  assert.deepEqual(tp.layers[0], [0.75, 0.25, 0, 0]);
  assert.equal(tp.window, 'recent');
});

test('a profile written is read back the same; a layer nothing was routed through is placed like the others', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-profile-'));
  try {
    const p = profileFromRanks(planOf('ep'), [counts([9, 1, 1, 1, 0, 0, 0, 0])]);
    const path = join(dir, 'p.json');
    writeExpertProfile(path, p);
    assert.deepEqual(readExpertProfile(path, { experts: 4, layers: 2 }), p);
    const layers = placeByProfile(p, 2, 1);
    assert.deepEqual(layers[1]!.perRank, layers[0]!.perRank);
    assert.ok(layers[0]!.copies[0]!.length === 2, 'the hot expert is copied');
    assert.ok(layersMaxNodeShare(layers) < 1.2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a profile that is not one, is malformed, or is of another model is PAR_BAD_PROFILE naming what is wrong', () => {
  const good = {
    format: EXPERT_PROFILE_FORMAT,
    experts: 2,
    window: 'recent',
    layers: [[0.5, 0.5]],
    choices: [4],
  };
  const cases: [string, RegExp, { experts: number; layers: number }?][] = [
    ['{', /not JSON/],
    [JSON.stringify({ ...good, format: 'x' }), /not a tandem-expert-profile/],
    [JSON.stringify({ ...good, layers: [[0.5, 2]] }), /one share in \[0, 1\] per expert/],
    [JSON.stringify({ ...good, choices: [] }), /one count per layer/],
    [
      JSON.stringify(good),
      /covers 1 layers of 2 experts; the model has 3 layers of 8/,
      { experts: 8, layers: 3 },
    ],
  ];
  for (const [text, message, model] of cases)
    assert.throws(
      () => parseExpertProfile(text, model),
      (e: unknown) => isTandemError(e) && e.code === 'PAR_BAD_PROFILE' && message.test(e.message),
      text,
    );
  const dir = mkdtempSync(join(tmpdir(), 'tandem-profile-'));
  try {
    writeFileSync(join(dir, 'p.json'), JSON.stringify(good));
    assert.equal(readExpertProfile(join(dir, 'p.json')).experts, 2);
    assert.throws(
      () => readExpertProfile(join(dir, 'missing.json')),
      (e: unknown) => isTandemError(e) && e.code === 'PAR_BAD_PROFILE' && /cannot read/.test(e.message),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
