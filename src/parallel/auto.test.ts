import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels } from '../kernels/index.js';
import { Model } from '../engine/model/model.js';
import { fullShard } from '../engine/model/shard.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import { shardBytes } from './memory.js';
import { chooseParallel } from './auto.js';
import { placeModel } from './placement.js';

const file = tinyModelFile({
  arch: 'llama',
  layers: 6,
  vocab: 256,
  width: 64,
  heads: 4,
  kvHeads: 2,
  ff: 128,
});
const config = (await Model.load(file, new ReferenceKernels())).config;
const m = { config, tensors: file.tensors };
const o = { contextLength: 64 };
const total = shardBytes(config, file.tensors, fullShard(config), o);

// 4 layers of width 512 (about 66 MB of f32 weights): reading them outweighs 8 all-reduces
const wideFile = tinyModelFile({
  arch: 'llama',
  layers: 4,
  vocab: 256,
  width: 512,
  heads: 8,
  kvHeads: 4,
  ff: 2048,
});
const wide = {
  config: (await Model.load(wideFile, new ReferenceKernels())).config,
  tensors: wideFile.tensors,
};

test('auto: alike nodes with room get tensor parallel on a model whose reads outweigh its collectives; the reason lists every candidate', () => {
  const choice = chooseParallel(wide, [{}, {}], o);
  assert.equal(choice.kind, 'tp');
  assert.match(choice.reason, /chose tp on 2 node\(s\): tp ~[\d.]+ ms a step .*; pp ~[\d.]+ ms a step/);
  assert.deepEqual(choice.placement, placeModel(wide, [{}, {}], { ...o, kind: 'tp' }));
});

test('auto: on a tiny model the collectives cost more than the halved reads: the pipeline', () => {
  assert.equal(chooseParallel(m, [{}, {}], o).kind, 'pp');
});

test('auto: where an even split does not fit one node, the pipeline that follows the memory is chosen', () => {
  const tp = placeModel(m, [{}, {}], { ...o, kind: 'tp' });
  // node 1 holds less than tensor parallel's even half, node 0 holds nearly everything
  const nodes = [{ memLimit: total }, { memLimit: Math.floor(Math.max(...tp.bytes) * 0.8) }];
  assert.throws(
    () => placeModel(m, nodes, { ...o, kind: 'tp' }),
    (e) => isTandemError(e, 'PAR_NO_FIT'),
  );
  const choice = chooseParallel(m, nodes, o);
  assert.equal(choice.kind, 'pp');
  assert.match(choice.reason, /tp does not fit/);
  assert.ok(choice.placement.bytes.every((b, r) => b <= (nodes[r]?.memLimit ?? Infinity)));
});

test('auto: a much slower node is given no equal share: the faster split wins on time, not on memory', () => {
  assert.equal(chooseParallel(wide, [{ speed: 1 }, { speed: 1 }], o).kind, 'tp');
  const choice = chooseParallel(wide, [{ speed: 10 }, { speed: 0.1 }], o);
  // tensor parallel waits for the slow node's half every step; the pipeline gives it few layers
  assert.equal(choice.kind, 'pp');
});

test('auto: nothing fits: PAR_NO_FIT with the sizes', () => {
  assert.throws(
    () => chooseParallel(m, [{ memLimit: 1000 }, { memLimit: 1000 }], o),
    (e) => isTandemError(e, 'PAR_NO_FIT'),
  );
});
