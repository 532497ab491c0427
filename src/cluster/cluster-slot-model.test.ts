import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { RemoteSequence } from './cluster-slot-model.js';

/*
 * A remote sequence's history (the forwards a replay runs on a new placement) after prompts
 * are reused: replaying it must fill every kept position with the same forward, at the same
 * offset in it, after the same positions, as the steps that really ran (a position's bits
 * depend on that forward and what came before it). A small model of the nodes' cache checks it.
 */

type Op = number[] | number | { keep: number };

/** Who filled each position: the forward (by identity) and the offset in it. */
type Writer = { op: object; at: number };

/** The nodes' cache as a list of writers, and for each forward the writers before it when it ran. */
class CacheModel {
  readonly cells: Writer[] = [];
  readonly context = new Map<object, Writer[]>();

  write(id: object, n: number): void {
    this.context.set(id, this.cells.slice());
    for (let i = 0; i < n; i++) this.cells.push({ op: id, at: i });
  }

  cut(keep: number): void {
    this.cells.length = keep;
  }
}

/** Replays `ops` into a fresh cache model; a decode token (a number) is named by `names`. */
function replay(ops: readonly Op[], names: Map<number, object>): CacheModel {
  const model = new CacheModel();
  for (const op of ops) {
    if (Array.isArray(op)) model.write(op, op.length);
    else if (typeof op === 'number') model.write(names.get(op) as object, 1);
    else model.cut(op.keep);
  }
  return model;
}

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

test('a truncated history replays to the same writers of every kept position, each after the same positions', () => {
  for (let trial = 0; trial < 300; trial++) {
    const rnd = random(trial + 1);
    const seq = new RemoteSequence(1, 100_000);
    const truth = new CacheModel();
    // decode tokens are numbers: each gets a distinct value so that it can be named
    let nextToken = 1_000_000;
    const names = new Map<number, object>();
    for (let step = 0; step < 40; step++) {
      const r = rnd();
      if (r < 0.35 && seq.length > 0) {
        const keep = Math.floor(rnd() * (seq.length + 1));
        seq.truncate(keep);
        truth.cut(keep);
        assert.equal(seq.length, keep);
        continue;
      }
      const op: number[] | number =
        r < 0.7 ? Array.from({ length: 1 + Math.floor(rnd() * 20) }, (_, i) => i) : nextToken++;
      if (typeof op === 'number') names.set(op, { token: op });
      const n = typeof op === 'number' ? 1 : op.length;
      truth.write(typeof op === 'number' ? (names.get(op) as object) : op, n);
      // what a step does to the sequence once the nodes have run it
      seq.ops.push(op);
      seq.length += n;
      seq.stale = false;
      seq.keep = undefined;
    }
    const again = replay(seq.ops, names);
    assert.ok(again.cells.length >= seq.length, `trial ${trial}: the replay fills the kept positions`);
    const kept = truth.cells.slice(0, seq.length);
    assert.deepEqual(again.cells.slice(0, seq.length), kept, `trial ${trial}: the same writers`);
    for (const w of new Set(kept.map((c) => c.op)))
      assert.deepEqual(
        again.context.get(w),
        truth.context.get(w),
        `trial ${trial}: the same positions before`,
      );
    // the history holds no forward whose positions are all gone, and ends at the kept length
    const ends = seq.ops.at(-1);
    if (ends !== undefined && typeof ends === 'object' && !Array.isArray(ends))
      assert.equal(ends.keep, seq.length);
    else assert.equal(again.cells.length, seq.length);
  }
});

test('a truncated sequence cuts the nodes back at its next step; a reset one starts them over instead', () => {
  const seq = new RemoteSequence(7, 1000);
  seq.ops.push([1, 2, 3, 4, 5, 6], 9, 10);
  seq.length = 8;
  seq.stale = false;
  seq.truncate(4);
  assert.equal(seq.keep, 4);
  assert.deepEqual(seq.ops, [[1, 2, 3, 4, 5, 6], { keep: 4 }]);
  seq.truncate(4);
  assert.deepEqual(seq.ops, [[1, 2, 3, 4, 5, 6], { keep: 4 }], 'cutting to the same length changes nothing');
  seq.reset();
  assert.equal(seq.keep, undefined);
  assert.equal(seq.stale, true);
  assert.equal(seq.ops.length, 0);
  // a sequence whose caches start over anyway is not cut
  seq.ops.push([1, 2, 3]);
  seq.length = 3;
  seq.truncate(2);
  assert.equal(seq.keep, undefined);
});

test('cutting a sequence past its length, or to a fraction, is a typed error', () => {
  const seq = new RemoteSequence(3, 1000);
  seq.ops.push([1, 2]);
  seq.length = 2;
  for (const bad of [3, -1, 1.5])
    assert.throws(
      () => seq.truncate(bad),
      (e) => isTandemError(e, 'CLUSTER_PROTOCOL') && e.message.includes(String(bad)),
    );
  assert.equal(seq.length, 2);
});
