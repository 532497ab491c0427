import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels } from '../kernels/index.js';
import { Model } from '../engine/model/model.js';
import { fullShard } from '../engine/model/shard.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import { commBytes, parseBytes, shardBytes } from './memory.js';
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

test('memory estimate counts every weight byte of the file once, plus the KV cache', () => {
  let fileBytes = 0;
  for (const [name, t] of file.tensors)
    fileBytes += file.readRows(
      name,
      0,
      t.dims.slice(1).reduce((a, b) => a * b, 1),
    ).byteLength;
  const kv = 2 * 6 * 2 * 16 * 64 * 4;
  assert.equal(total, fileBytes + kv);
});

test('a model larger than one node runs when the nodes together hold it', () => {
  assert.throws(
    () => placeModel(m, [{ memLimit: Math.floor(total * 0.7) }], { kind: 'tp', ...o }),
    (e) => isTandemError(e, 'PAR_NO_FIT'),
  );
  const tp = placeModel(m, [{ memLimit: Math.floor(total * 0.7) }, { memLimit: Math.floor(total * 0.7) }], {
    kind: 'tp',
    ...o,
  });
  assert.ok(tp.bytes.every((b) => b <= total * 0.7));
  assert.ok(tp.bytes.reduce((a, b) => a + b, 0) >= total, 'shards together hold at least the model');
});

test('pipeline layers follow speed, then move off a node over its memory limit', () => {
  const fast = placeModel(m, [{ speed: 1 }, { speed: 2 }], { kind: 'pp', ...o });
  assert.deepEqual(
    fast.plan.ranks.map((r) => r.shard.layers.end - r.shard.layers.start),
    [2, 4],
  );
  const small = placeModel(m, [{ speed: 1 }, { speed: 2, memLimit: Math.floor(total * 0.45) }], {
    kind: 'pp',
    ...o,
  });
  const layers = small.plan.ranks.map((r) => r.shard.layers.end - r.shard.layers.start);
  assert.ok(layers[1]! < 4 && layers[0]! + layers[1]! === 6, `layers ${layers}`);
  assert.ok(small.bytes[1]! <= total * 0.45);
});

test('when nothing fits, the error gives the sizes and a placement that would', () => {
  const limit = Math.floor(total * 0.4);
  assert.throws(
    () => placeModel(m, [{ memLimit: limit }, { memLimit: limit }], { kind: 'tp', ...o }),
    (e) =>
      isTandemError(e, 'PAR_NO_FIT') &&
      /rank 0 needs .* of /.test(e.message) &&
      /--nodes 3 --parallel (tp|pp) would fit/.test(e.hint),
  );
});

test('byte sizes parse with binary suffixes', () => {
  assert.equal(parseBytes('512M'), 512 * 1024 * 1024);
  assert.equal(parseBytes('1.5GiB'), 1.5 * 1024 ** 3);
  assert.equal(parseBytes('1000'), 1000);
  assert.equal(parseBytes('lots'), undefined);
});

test('communication buffers count against the limit: shm needs its rings and the direct exchange, tcp far less', () => {
  const shm = commBytes({ nodes: 2, tpSize: 2 }, 'shm');
  const tcp = commBytes({ nodes: 2, tpSize: 2 }, 'tcp');
  assert.equal(commBytes({ nodes: 1, tpSize: 1 }, 'shm'), 0, 'one node has no links');
  assert.ok(shm > tcp && tcp > 0, `shm ${shm} B, tcp ${tcp} B`);
  // pipeline stages have groups of one: no direct exchange, only the world's links
  assert.ok(commBytes({ nodes: 2, tpSize: 1 }, 'shm') < shm);
  const bare = placeModel(m, [{}, {}], { kind: 'tp', ...o });
  const limit = Math.max(...bare.bytes) + tcp;
  const overTcp = placeModel(m, [{ memLimit: limit }, { memLimit: limit }], {
    kind: 'tp',
    provider: 'tcp',
    ...o,
  });
  assert.equal(overTcp.commBytes, tcp);
  assert.deepEqual(
    overTcp.bytes,
    bare.bytes.map((b) => b + tcp),
  );
  assert.throws(
    () => placeModel(m, [{ memLimit: limit }, { memLimit: limit }], { kind: 'tp', provider: 'shm', ...o }),
    (e) =>
      isTandemError(e, 'PAR_NO_FIT') &&
      /of shm buffers/.test(e.message) &&
      (e.details as { commBytes: number }).commBytes === shm,
  );
});

test('pipeline layers move off a node over its limit when the limit also holds the buffers', () => {
  const tcp = commBytes({ nodes: 2, tpSize: 1 }, 'tcp');
  const limit = Math.floor(total * 0.45) + tcp;
  const small = placeModel(m, [{ speed: 1 }, { speed: 2, memLimit: limit }], {
    kind: 'pp',
    provider: 'tcp',
    ...o,
  });
  const layers = small.plan.ranks.map((r) => r.shard.layers.end - r.shard.layers.start);
  assert.ok(layers[1]! < 4 && layers[0]! + layers[1]! === 6, `layers ${layers}`);
  assert.ok(small.bytes[1]! <= limit, `${small.bytes[1]} B over ${limit}`);
  assert.equal(small.commBytes, tcp);
});

test('every slot of a server holds a KV cache: a plan that fits one sequence is refused for many, and the hint names --slots', () => {
  const one = shardBytes(config, file.tensors, fullShard(config), o);
  const four = shardBytes(config, file.tensors, fullShard(config), { ...o, sequences: 4 });
  const kv = 2 * 6 * 2 * 16 * 64 * 4;
  assert.equal(four - one, 3 * kv);
  const limit = [{ memLimit: one + kv }];
  assert.ok(placeModel(m, limit, { kind: 'tp', ...o }).bytes[0]! <= one + kv);
  assert.throws(
    () => placeModel(m, limit, { kind: 'tp', ...o, sequences: 4 }),
    (e) =>
      isTandemError(e, 'PAR_NO_FIT') &&
      /fewer --slots/.test(String(e.hint)) &&
      /4 slots/.test(String(e.hint)),
  );
});
