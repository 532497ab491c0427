import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { Rng } from './rng.js';
import { Sampler, type SamplerOptions } from './sampler.js';

/** Logits whose softmax is exactly the given probabilities. */
const fromProbs = (p: number[]): Float32Array => Float32Array.from(p, Math.log);

function randomLogits(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.next() * 10 - 5);
}

function draw(options: SamplerOptions, logits: Float32Array, n: number): number[] {
  const s = new Sampler(options);
  return Array.from({ length: n }, () => s.sample(logits));
}

const codeOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    if (isTandemError(e)) return e.code;
    throw e;
  }
  return 'no error';
};

describe('Sampler', () => {
  it('greedy takes the argmax, lowest id on ties', () => {
    const s = new Sampler({ temperature: 0 });
    assert.equal(s.sample(Float32Array.of(0.1, 3, -2, 3)), 1);
    assert.equal(s.sample(Float32Array.of(-Infinity, -5, -Infinity)), 1);
  });

  it('top-k = 1 equals greedy at any temperature and seed', () => {
    const rng = new Rng(7);
    for (let t = 0; t < 50; t++) {
      const logits = randomLogits(rng, 100);
      const greedy = new Sampler({ temperature: 0 }).sample(logits);
      assert.equal(new Sampler({ temperature: 1.5, topK: 1, seed: t }).sample(logits), greedy);
    }
  });

  it('top-k keeps the k most likely tokens', () => {
    const d = new Sampler({ temperature: 1, topK: 2, topP: 1, minP: 0 }).distribution(
      fromProbs([0.1, 0.4, 0.2, 0.3]),
    );
    assert.deepEqual(d.ids, [1, 3]);
    assert.ok(Math.abs((d.probs[0] as number) - 4 / 7) < 1e-6);
  });

  it('top-p keeps the smallest prefix reaching p', () => {
    const logits = fromProbs([0.05, 0.5, 0.15, 0.3]);
    const ids = (topP: number): number[] =>
      new Sampler({ temperature: 1, topK: 0, topP, minP: 0 }).distribution(logits).ids;
    assert.deepEqual(ids(0.4), [1]);
    assert.deepEqual(ids(0.75), [1, 3]);
    assert.deepEqual(ids(0.85), [1, 3, 2]);
    assert.deepEqual(ids(1), [0, 1, 2, 3]); // disabled: everything, in id order
  });

  it('top-p over a large vocabulary equals the plain full-sort definition', () => {
    const rng = new Rng(99);
    for (const [spread, p] of [
      [2, 0.9],
      [20, 0.95],
      [200, 0.5],
      [0.01, 0.99],
    ] as const) {
      const logits = Float32Array.from({ length: 5000 }, () => (rng.next() - 0.5) * spread);
      const sorted = Array.from(logits.keys()).sort(
        (a, b) => (logits[b] as number) - (logits[a] as number) || a - b,
      );
      const max = logits[sorted[0] as number] as number;
      const w = sorted.map((id) => Math.exp((logits[id] as number) - max));
      const total = w.reduce((a, b) => a + b, 0);
      let cum = 0;
      let keep = sorted.length;
      for (let i = 0; i < w.length; i++) {
        cum += (w[i] as number) / total;
        if (cum >= p) {
          keep = i + 1;
          break;
        }
      }
      const got = new Sampler({ temperature: 1, topK: 0, topP: p, minP: 0 }).distribution(logits).ids;
      assert.deepEqual(got, sorted.slice(0, keep), `spread ${spread} p ${p}`);
    }
  });

  it('min-p drops tokens below minP x the top probability', () => {
    const logits = fromProbs([0.05, 0.5, 0.15, 0.3]);
    const ids = (minP: number): number[] =>
      new Sampler({ temperature: 1, topK: 0, topP: 1, minP }).distribution(logits).ids;
    assert.deepEqual(ids(0.2), [1, 3, 2]); // floor 0.1 keeps 0.15, drops 0.05
    assert.deepEqual(ids(0.35), [1, 3]); // floor 0.175 drops 0.15
    assert.deepEqual(ids(0.9), [1]);
    const drawn = new Set(draw({ temperature: 1, topK: 0, topP: 1, minP: 0.2, seed: 3 }, logits, 2000));
    assert.deepEqual([...drawn].sort(), [1, 2, 3]);
  });

  it('temperature sharpens or flattens the distribution', () => {
    const logits = fromProbs([0.2, 0.8]); // probs[1] is token 1 (no truncation keeps id order)
    const p = (temperature: number): number =>
      new Sampler({ temperature, topK: 0, topP: 1, minP: 0 }).distribution(logits).probs[1] as number;
    assert.ok(Math.abs(p(1) - 0.8) < 1e-6);
    assert.ok(Math.abs(p(0.5) - 0.64 / 0.68) < 1e-6); // p^2 renormalised
    assert.ok(p(100) < 0.51);
  });

  it('draws tokens with their probabilities', () => {
    const probs = [0.1, 0.2, 0.3, 0.4];
    const n = 20000;
    const counts = [0, 0, 0, 0];
    for (const id of draw({ temperature: 1, topK: 0, topP: 1, minP: 0, seed: 11 }, fromProbs(probs), n))
      counts[id]!++;
    counts.forEach((c, i) =>
      assert.ok(Math.abs(c / n - (probs[i] as number)) < 0.015, `token ${i}: ${c / n}`),
    );
  });

  it('penalises recent tokens within the window only', () => {
    const logits = Float32Array.of(2, 1.9, -1, -1.2);
    const s = new Sampler({ temperature: 0, repeatPenalty: 1.5, repeatLastN: 2 });
    s.accept(0);
    assert.equal(s.sample(logits), 1); // 2 / 1.5 < 1.9
    const t = new Sampler({ temperature: 0, repeatPenalty: 1.5, repeatLastN: 1 });
    t.accept(0, 3);
    assert.equal(t.sample(logits), 0); // 0 fell out of the window
    const u = new Sampler({ temperature: 0, repeatPenalty: 1.5 });
    u.accept(0, 1, 2);
    assert.equal(u.sample(Float32Array.of(-1, -1.1, -0.9, -1.3)), 3); // negatives multiplied: -1.5 -1.65 -1.35 vs -1.3
    u.reset();
    assert.equal(u.sample(Float32Array.of(-1, -1.1, -0.9, -1.3)), 2);
  });

  it('logit bias is added before anything else: -100 bans the argmax, +100 forces a token; with it the sampler is not greedy', () => {
    const logits = Float32Array.of(2, 1.5, 1.2, -1);
    assert.equal(new Sampler({ temperature: 0 }).greedy, true);
    const ban = new Sampler({ temperature: 0, logitBias: new Map([[0, -100]]) });
    assert.equal(ban.greedy, false);
    assert.equal(ban.sample(logits), 1);
    const force = new Sampler({
      temperature: 1,
      topK: 0,
      topP: 1,
      minP: 0,
      logitBias: new Map([[3, 100]]),
      seed: 3,
    });
    for (let i = 0; i < 20; i++) assert.equal(force.sample(logits), 3);
    // the bias goes before the penalties: token 1 biased up, then penalised once
    const both = new Sampler({ temperature: 0, logitBias: new Map([[1, 1]]), frequencyPenalty: 0.4 });
    both.accept(1);
    assert.equal(both.sample(logits), 1); // 1.5 + 1 - 0.4 = 2.1 > 2
    // a bias past the logits' length changes nothing; the logits themselves are not written
    assert.equal(new Sampler({ temperature: 0, logitBias: new Map([[9, 100]]) }).sample(logits), 0);
    assert.deepEqual([...logits], [2, 1.5, 1.2000000476837158, -1]);
    for (const bad of [new Map([[0, 101]]), new Map([[-1, 1]]), new Map([[1.5, 1]]), new Map([[0, NaN]])])
      assert.throws(
        () => new Sampler({ logitBias: bad }),
        (e) => isTandemError(e, 'SAMPLER_PARAMS'),
      );
  });

  it('presence and frequency penalties subtract per token seen and per occurrence, within the window', () => {
    const logits = Float32Array.of(2, 1.5, 1.2, -1);
    const presence = new Sampler({ temperature: 0, presencePenalty: 0.6 });
    presence.accept(0, 0, 0);
    assert.equal(presence.sample(logits), 1); // 2 - 0.6 < 1.5, once however often 0 occurred
    const once = new Sampler({ temperature: 0, frequencyPenalty: 0.4 });
    once.accept(0);
    assert.equal(once.sample(logits), 0); // 2 - 0.4 > 1.5
    const twice = new Sampler({ temperature: 0, frequencyPenalty: 0.4 });
    twice.accept(0, 0);
    assert.equal(twice.sample(logits), 1); // 2 - 0.8 < 1.5
    const both = new Sampler({ temperature: 0, presencePenalty: 0.5, frequencyPenalty: 0.5 });
    both.accept(0, 1);
    assert.equal(both.sample(logits), 2); // 1.0 and 0.5 against 1.2
    const negative = new Sampler({ temperature: 0, presencePenalty: -1 });
    negative.accept(2);
    assert.equal(negative.sample(logits), 2); // a negative penalty favours what was seen
    const window = new Sampler({ temperature: 0, frequencyPenalty: 2, repeatLastN: 1 });
    window.accept(0, 3);
    assert.equal(window.sample(logits), 0); // 0 fell out of the window
    const d = new Sampler({ temperature: 1, topK: 0, topP: 1, minP: 0, frequencyPenalty: 1, seed: 1 });
    d.accept(1);
    const dist = d.distribution(Float32Array.of(0, 1));
    assert.deepEqual(dist.ids, [0, 1]);
    assert.ok(Math.abs((dist.probs[0] as number) - 0.5) < 1e-12, 'logit 1 - 1 ties logit 0');
  });

  it('the same seed gives the same sequence, another seed another', () => {
    const logits = randomLogits(new Rng(5), 500);
    const opts = { temperature: 1.2, topK: 0, topP: 1, minP: 0 };
    const a = draw({ ...opts, seed: 42 }, logits, 64);
    assert.deepEqual(draw({ ...opts, seed: 42 }, logits, 64), a);
    assert.notDeepEqual(draw({ ...opts, seed: 43 }, logits, 64), a);
    assert.ok(new Set(a).size > 10);
  });

  it('rejects bad parameters and bad logits with typed errors', () => {
    for (const bad of [
      { temperature: -1 },
      { temperature: NaN },
      { topK: 1.5 },
      { topK: -1 },
      { topP: 0 },
      { topP: 1.1 },
      { minP: -0.1 },
      { minP: 2 },
      { repeatPenalty: 0 },
      { repeatLastN: -1 },
      { presencePenalty: 2.5 },
      { frequencyPenalty: -3 },
      { frequencyPenalty: NaN },
      { seed: -1 },
      { seed: 0.5 },
    ])
      assert.equal(
        codeOf(() => new Sampler(bad)),
        'SAMPLER_PARAMS',
        JSON.stringify(bad),
      );
    const s = new Sampler({ seed: 1 });
    assert.equal(
      codeOf(() => s.sample(new Float32Array(0))),
      'SAMPLER_LOGITS',
    );
    assert.equal(
      codeOf(() => s.sample(Float32Array.of(1, NaN))),
      'SAMPLER_LOGITS',
    );
    assert.equal(
      codeOf(() => s.sample(Float32Array.of(-Infinity, -Infinity))),
      'SAMPLER_LOGITS',
    );
  });
});

describe('Rng', () => {
  it('is deterministic and roughly uniform', () => {
    const a = new Rng(123);
    const b = new Rng(123);
    let sum = 0;
    for (let i = 0; i < 10000; i++) {
      const x = a.next();
      assert.equal(x, b.next());
      assert.ok(x >= 0 && x < 1);
      sum += x;
    }
    assert.ok(Math.abs(sum / 10000 - 0.5) < 0.01);
    assert.notEqual(new Rng(1).nextU32(), new Rng(2).nextU32());
  });
});
