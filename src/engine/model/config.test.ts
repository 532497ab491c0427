import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../../errors/index.js';
import { configFromMetadata, type TensorDims } from './config.js';
import { fullShard, kvHeadsFor, validateShard } from './shard.js';

function lookup(values: Record<string, unknown>): (key: string) => unknown {
  return (key) => values[key];
}

const llamaMeta = {
  'general.architecture': 'llama',
  'llama.context_length': 256,
  'llama.embedding_length': 64,
  'llama.block_count': 2,
  'llama.feed_forward_length': 96,
  'llama.attention.head_count': 8,
  'llama.attention.head_count_kv': 2,
  'llama.attention.layer_norm_rms_epsilon': 1e-5,
  'tokenizer.ggml.tokens': Array.from({ length: 300 }, (_, i) => `t${i}`),
};

const denseTensors: TensorDims = new Map([
  ['token_embd.weight', [64, 300]],
  ['output.weight', [64, 300]],
]);

test('llama config: defaults, GQA, tied embeddings and rope freq factors from tensors', () => {
  const c = configFromMetadata(lookup(llamaMeta), denseTensors);
  assert.equal(c.arch, 'llama');
  assert.equal(c.headDim, 8);
  assert.equal(c.headCountKv, 2);
  assert.equal(c.ropeStyle, 'normal');
  assert.equal(c.ropeFreqBase, 10000);
  assert.equal(c.ropeFreqScale, 1);
  assert.equal(c.vocabSize, 300);
  assert.equal(c.tiedEmbeddings, false);
  assert.equal(c.expertCount, 0);
  const tied = configFromMetadata(
    lookup({
      ...llamaMeta,
      'llama.rope.freq_base': 500000,
      'llama.rope.scaling.type': 'linear',
      'llama.rope.scaling.factor': 4,
    }),
    new Map([
      ['token_embd.weight', [64, 300]],
      ['rope_freqs.weight', [4]],
    ]),
  );
  assert.equal(tied.tiedEmbeddings, true);
  assert.equal(tied.hasRopeFreqFactors, true);
  assert.equal(tied.ropeFreqBase, 500000);
  assert.equal(tied.ropeFreqScale, 0.25);
  // Mixtral-style experts (arch llama) are feed_forward_length wide, as llama.cpp reads them.
  const mixtral = configFromMetadata(
    lookup({
      ...llamaMeta,
      'llama.expert_count': 8,
      'llama.expert_used_count': 2,
      'llama.expert_feed_forward_length': 7,
    }),
    denseTensors,
  );
  assert.equal(mixtral.expertFeedForwardLength, 96);
  assert.equal(mixtral.expertWeightsNorm, true);
});

test('qwen2, qwen3 and MoE configs read their arch-specific keys', () => {
  const q2 = {
    ...Object.fromEntries(Object.entries(llamaMeta).map(([k, v]) => [k.replace(/^llama\./, 'qwen2.'), v])),
  };
  q2['general.architecture'] = 'qwen2';
  const c2 = configFromMetadata(lookup(q2), new Map([...denseTensors, ['blk.0.attn_q.bias', [64]]]));
  assert.equal(c2.ropeStyle, 'neox');
  assert.equal(c2.hasQkvBias, true);

  const q3 = {
    ...Object.fromEntries(Object.entries(q2).map(([k, v]) => [k.replace(/^qwen2\./, 'qwen3moe.'), v])),
  };
  Object.assign(q3, {
    'general.architecture': 'qwen3moe',
    'qwen3moe.attention.key_length': 16,
    'qwen3moe.expert_count': 4,
    'qwen3moe.expert_used_count': 2,
    'qwen3moe.expert_feed_forward_length': 32,
  });
  const c3 = configFromMetadata(lookup(q3), new Map([...denseTensors, ['blk.0.attn_q_norm.weight', [16]]]));
  assert.equal(c3.headDim, 16);
  assert.equal(c3.hasQkNorm, true);
  assert.equal(c3.expertCount, 4);
  assert.equal(c3.expertFeedForwardLength, 32);
  assert.equal(c3.expertWeightsNorm, true);
  assert.equal(c3.sharedExpertFeedForwardLength, 0);

  const q2moe = {
    ...Object.fromEntries(Object.entries(q3).map(([k, v]) => [k.replace(/^qwen3moe\./, 'qwen2moe.'), v])),
  };
  Object.assign(q2moe, {
    'general.architecture': 'qwen2moe',
    'qwen2moe.expert_shared_feed_forward_length': 48,
  });
  const c4 = configFromMetadata(lookup(q2moe), denseTensors);
  assert.equal(c4.expertWeightsNorm, false);
  assert.equal(c4.sharedExpertFeedForwardLength, 48);
});

test('bad metadata raises typed errors naming the key', () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ ...llamaMeta, 'general.architecture': 'gpt2' }, 'MODEL_UNSUPPORTED_ARCH', 'gpt2'],
    [{ ...llamaMeta, 'llama.attention.head_count': undefined }, 'MODEL_CONFIG', 'llama.attention.head_count'],
    [{ ...llamaMeta, 'llama.attention.head_count_kv': 3 }, 'MODEL_CONFIG', 'head_count_kv'],
    [{ ...llamaMeta, 'llama.block_count': -1 }, 'MODEL_CONFIG', 'llama.block_count'],
    [{ ...llamaMeta, 'llama.embedding_length': 'wide' }, 'MODEL_CONFIG', 'llama.embedding_length'],
    [
      { ...llamaMeta, 'llama.expert_count': 4, 'llama.expert_used_count': 5 },
      'MODEL_CONFIG',
      'expert_used_count',
    ],
    [{ ...llamaMeta, 'llama.rope.dimension_count': 4 }, 'MODEL_CONFIG', 'rope.dimension_count'],
  ];
  for (const [meta, code, text] of cases) {
    assert.throws(
      () => configFromMetadata(lookup(meta), denseTensors),
      (e) => isTandemError(e) && e.code === code && e.message.includes(text),
      `${code} ${text}`,
    );
  }
});

test('shards: KV heads follow the query heads, replicated when the split does not align', () => {
  const c = configFromMetadata(lookup(llamaMeta), denseTensors);
  assert.deepEqual(kvHeadsFor(c, { start: 0, end: 4 }), { start: 0, end: 1 });
  assert.deepEqual(kvHeadsFor(c, { start: 4, end: 8 }), { start: 1, end: 2 });
  assert.deepEqual(kvHeadsFor(c, { start: 3, end: 6 }), { start: 0, end: 2 });
  validateShard(c, fullShard(c));
  assert.throws(
    () => validateShard(c, { ...fullShard(c), layers: { start: 1, end: 3 } }),
    (e) => isTandemError(e, 'MODEL_SHARD') && e.message.includes('layers'),
  );
});
