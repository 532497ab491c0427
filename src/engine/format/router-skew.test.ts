import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GgufModelFile } from '../model/gguf-model-file.js';
import { Model } from '../model/model.js';
import { ExpertLoad } from '../model/expert-load.js';
import { planFor } from './make-model.js';
import { modelShapes } from './model-plan.js';
import { createKernels } from '../../kernels/index.js';
import { tempModel } from '../testing/temp-model.js';
import { Rng } from './random-weights.js';
import { parseRouterSkew, topKFrequencies, zipfChoiceShares, zipfLogitOffsets } from './router-skew.js';

const EXPERTS = 16;
const USED = 2;
const S = 1.2;
/** As deep as TinyLlama (22 layers): what the layers write must not move routing, layer after layer. */
const skewed = tempModel('tandem-skew-', {
  arch: 'qwen3moe',
  shape: { ...modelShapes.tiny!, layers: 22 },
  type: 'q8_0',
  seed: 4,
  experts: EXPERTS,
  expertsUsed: USED,
  routerSkew: { kind: 'zipf', s: S },
});

test('Zipf choice shares: sum to k, none above 1, in Zipf order', () => {
  const shares = zipfChoiceShares(EXPERTS, USED, S);
  assert.ok(Math.abs(shares.reduce((a, b) => a + b, 0) - USED) < 1e-9);
  assert.ok(shares.every((v) => v <= 1 + 1e-12));
  for (let e = 1; e < EXPERTS; e++) assert.ok(shares[e]! < shares[e - 1]!);
  // uncapped experts keep Zipf's ratios
  assert.ok(Math.abs(shares[2]! / shares[3]! - (4 / 3) ** S) < 1e-9);
});

test('the calibrated logit offsets give each expert its share of top-k choices', () => {
  const offsets = zipfLogitOffsets(EXPERTS, USED, S, 1);
  const f = topKFrequencies(offsets, USED, 20000, new Rng(77));
  const target = zipfChoiceShares(EXPERTS, USED, S);
  for (let e = 0; e < EXPERTS; e++)
    assert.ok(Math.abs(f[e]! - target[e]!) < 0.03, `expert ${e}: ${f[e]} vs ${target[e]}`);
});

test('a generated model with --router-skew routes its tokens Zipf-skewed in every layer (measured by its load counters)', async () => {
  const kernels = await createKernels({ threads: 1 });
  const file = GgufModelFile.open(skewed());
  try {
    const model = await Model.load(file, kernels);
    const rng = new Rng(5);
    const tokens = Array.from({ length: 400 }, () => 3 + (rng.nextU32() % (model.config.vocabSize - 3)));
    await model.forward(tokens, model.newSession({ contextLength: 512 }));
    const load = model.expertLoad!;
    const target = zipfChoiceShares(EXPERTS, USED, S).map((v) => v / USED);
    for (let l = 0; l < load.layers; l++) {
      const shares = load.shares(l);
      const hottest = shares.indexOf(Math.max(...shares));
      assert.equal(hottest, 0, `layer ${l}: hottest expert ${hottest} (${shares.map((v) => v.toFixed(3))})`);
      // 800 choices a layer: a share's sampling spread is about 0.02 at expert 0's
      for (const e of [0, 1, 2])
        assert.ok(
          Math.abs(shares[e]! - target[e]!) < 0.06,
          `layer ${l}: expert ${e} share ${shares[e]} vs ${target[e]}`,
        );
      // the hot half takes most of the traffic, as Zipf's does
      const hot = shares.slice(0, EXPERTS / 2).reduce((a, b) => a + b, 0);
      const want = target.slice(0, EXPERTS / 2).reduce((a, b) => a + b, 0);
      assert.ok(Math.abs(hot - want) < 0.06, `layer ${l}: hot half ${hot} vs ${want}`);
    }
    assert.equal(file.meta('tandem.router_skew'), `zipf:${S}`);
  } finally {
    file.close();
    await kernels.close();
  }
});

test('--router-skew parsing: zipf:S only, S in (0, 4]', () => {
  assert.deepEqual(parseRouterSkew('zipf:1.5'), { kind: 'zipf', s: 1.5 });
  for (const bad of ['zipf', 'zipf:0', 'zipf:9', 'uniform:1'])
    assert.throws(() => parseRouterSkew(bad), /router-skew/);
});

test('a dense architecture refuses --router-skew; --experts-used above --experts is a usage error', () => {
  assert.throws(
    () => planFor({ arch: 'llama', shape: 'tiny', type: 'f32', routerSkew: { kind: 'zipf', s: 1 } }),
    /mixtures of experts/,
  );
  assert.throws(
    () => planFor({ arch: 'qwen3moe', shape: 'tiny', type: 'f32', experts: 4, expertsUsed: 5 }),
    /experts per token/,
  );
});

test('expert load: totals count every choice; the recent window halves every halfLife choices', () => {
  const load = new ExpertLoad(2, 4, 8);
  load.record(0, [0, 0, 1, 3]);
  load.record(1, [2]);
  assert.deepEqual(load.shares(0), [0.5, 0.25, 0, 0.25]);
  assert.deepEqual(load.shares(), [0.4, 0.2, 0.2, 0.2]);
  load.record(0, [1, 1, 1, 1, 1, 1, 1, 1]);
  assert.equal(load.totals[0], 2);
  assert.ok(Math.abs(load.recent[0]! - 1) < 1e-12, 'expert 0 decayed by half over 8 choices');
});
