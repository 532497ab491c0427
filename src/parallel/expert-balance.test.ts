import { test } from 'node:test';
import assert from 'node:assert/strict';
import { zipfChoiceShares } from '../engine/format/router-skew.js';
import { TandemError } from '../errors/index.js';
import { balanceExperts, contiguousExperts, copyFor, maxNodeShare } from './expert-balance.js';

const zipf = zipfChoiceShares(16, 2, 1.2);

test('Zipf-skewed load over 4 ranks: the static split leaves one rank with most of the work; balanced with copies, the busiest is within 1.15x the mean', () => {
  const flat = contiguousExperts(zipf, 4);
  assert.ok(maxNodeShare(flat) > 2, `static ${maxNodeShare(flat)}`);
  const p = balanceExperts(zipf, 4, 6);
  assert.ok(maxNodeShare(p) <= 1.15, `balanced ${maxNodeShare(p)}`);
  assert.ok(p.copies[0]!.length >= 2, 'the hottest expert has copies');
  assert.ok(Math.abs(p.rankShares.reduce((a, b) => a + b, 0) - 1) < 1e-9);
});

test('every expert is held, no rank over its room, no rank holds an expert twice; the same loads give the same placement', () => {
  for (const [loads, ranks, cap] of [
    [zipf, 4, 5],
    [zipf, 3, 8],
    [new Array(8).fill(1), 4, 2],
    [[0, 0, 0, 5], 2, 2],
  ] as [number[], number, number][]) {
    const p = balanceExperts(loads, ranks, cap);
    loads.forEach((_, e) => assert.ok(p.copies[e]!.length >= 1, `expert ${e} held`));
    for (const held of p.perRank) {
      assert.ok(held.length <= cap);
      assert.equal(new Set(held).size, held.length);
    }
    assert.deepEqual(balanceExperts(loads, ranks, cap), p);
  }
});

test('copyFor spreads an expert round robin over its copies, and every rank computes the same copy', () => {
  const p = balanceExperts(zipf, 4, 6);
  const hits = new Map<number, number>();
  for (let t = 0; t < 1000; t++) hits.set(copyFor(p, 0, t), (hits.get(copyFor(p, 0, t)) ?? 0) + 1);
  assert.deepEqual([...hits.keys()].sort(), [...p.copies[0]!].sort());
  const counts = [...hits.values()];
  assert.ok(Math.max(...counts) - Math.min(...counts) <= 1);
});

test('too little room is a typed error naming the sizes', () => {
  assert.throws(
    () => balanceExperts(zipf, 2, 7),
    (e: unknown) =>
      e instanceof TandemError && e.code === 'PAR_BAD_PLAN' && /cannot hold 16 experts/.test(e.message),
  );
});
