import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  pairwiseSteps,
  rhdOwners,
  rhdPlan,
  ringAllGatherSteps,
  ringReduceScatterSteps,
} from './schedules.js';

/** Runs a ring reduce-scatter symbolically: each chunk is the list of ranks summed into it, in order. */
function simulateRing(n: number): string[][][] {
  const held = Array.from({ length: n }, (_, p) => Array.from({ length: n }, () => [String(p)]));
  const plans = Array.from({ length: n }, (_, p) => ringReduceScatterSteps(n, p));
  for (let s = 0; s < n - 1; s++) {
    const sent = plans.map((plan, p) => ({ chunk: plan[s]!.send, data: held[p]![plan[s]!.send]! }));
    for (let p = 0; p < n; p++) {
      const from = sent[(p - 1 + n) % n]!;
      assert.equal(
        from.chunk,
        plans[p]![s]!.recv,
        `n=${n} step ${s}: position ${p} expects the chunk its predecessor sends`,
      );
      held[p]![from.chunk] = [...from.data, String(p)];
    }
  }
  return held;
}

test('ring reduce-scatter leaves position p with chunk p reduced over every rank', () => {
  for (let n = 1; n <= 9; n++) {
    const held = simulateRing(n);
    for (let p = 0; p < n; p++)
      assert.deepEqual([...held[p]![p]!].sort(), Array.from({ length: n }, (_, i) => String(i)).sort());
  }
});

test('ring all-gather delivers every chunk to every position, each received once', () => {
  for (let n = 1; n <= 9; n++) {
    for (let p = 0; p < n; p++) {
      const steps = ringAllGatherSteps(n, p);
      const got = new Set([p, ...steps.map((s) => s.recv)]);
      assert.equal(got.size, n);
      steps.forEach((s, i) =>
        assert.equal(s.send, i === 0 ? p : steps[i - 1]!.recv, 'forward what arrived last'),
      );
      const prev = ringAllGatherSteps(n, (p - 1 + n) % n);
      steps.forEach((s, i) => assert.equal(s.recv, prev[i]!.send));
    }
  }
});

test('recursive halving: partners agree, chunk ranges are complementary, owners cover every chunk', () => {
  for (let n = 1; n <= 12; n++) {
    const plans = Array.from({ length: n }, (_, r) => rhdPlan(n, r));
    const core = plans.filter((pl) => pl.role !== 'extra');
    assert.equal(core.length, plans[0]!.p);
    for (let r = 0; r < n; r++) {
      const pl = plans[r]!;
      if (pl.role === 'extra') {
        assert.equal(plans[pl.foldPartner]!.foldPartner, r);
        continue;
      }
      pl.steps.forEach((st, i) => {
        const other = plans[st.partner]!.steps[i]!;
        assert.equal(other.partner, r);
        assert.deepEqual(other.give, st.keep);
        assert.deepEqual(other.keep, st.give);
      });
      const last = pl.steps.at(-1)?.keep ?? [0, 1];
      assert.deepEqual(last, [pl.virtual, pl.virtual + 1]);
    }
    const owners = rhdOwners(n);
    assert.equal(new Set(owners).size, owners.length);
    owners.forEach((o, v) => assert.equal(plans[o]!.virtual, v));
  }
});

test('pairwise all-to-all: every ordered pair exactly once, and sends meet receives', () => {
  for (let n = 1; n <= 8; n++) {
    const pairs = new Set<string>();
    for (let r = 0; r < n; r++) {
      pairwiseSteps(n, r).forEach((s, i) => {
        pairs.add(`${r}>${s.to}`);
        assert.equal(pairwiseSteps(n, s.to)[i]!.from, r);
      });
    }
    assert.equal(pairs.size, n * (n - 1));
  }
});
