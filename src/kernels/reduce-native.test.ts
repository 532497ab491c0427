import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  flatTree,
  loadFastReduce,
  nativeReduceLoaded,
  nativeReduceReason,
  reduceFast,
  reducePath,
  sumTree,
  treeSpares,
  type SumTree,
} from './reduce-native.js';
import { reduceConformance, xorshift, type FastReduce } from './reduce-fast.cases.js';

function hasCompiler(): boolean {
  try {
    execFileSync(process.env.CC ?? 'cc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

test('the native reduce kernels build here when a C compiler is present', async () => {
  const ok = await loadFastReduce();
  if (process.env.TANDEM_NATIVE_REDUCE === '0' || !hasCompiler()) assert.equal(ok, false);
  else assert.equal(ok, true, nativeReduceReason);
  assert.equal(nativeReduceLoaded(), ok);
});

/** reduceFast, asserted to run the native kernel (the lengths below are all past its thresholds). */
async function loadNative(): Promise<FastReduce | string> {
  if (!(await loadFastReduce())) return nativeReduceReason;
  return (op, dtype, acc, other) => {
    assert.equal(reducePath(dtype, acc.length), 'native');
    reduceFast(op, dtype, acc, other);
  };
}

reduceConformance('native', loadNative, [256, 257, 1000, 4099]);

test('reduceFast runs reduce.ts below the thresholds (f32/i32 256, f16/bf16 32 elements), and checks lengths', async () => {
  await loadFastReduce();
  const fast = reducePath('f32', 1 << 20);
  assert.equal(fast === 'native', nativeReduceLoaded());
  assert.equal(reducePath('f32', 255), 'ts');
  assert.equal(reducePath('i32', 256), fast);
  assert.equal(reducePath('f16', 31), 'ts');
  assert.equal(reducePath('bf16', 32), fast);
  const a = Uint16Array.of(0x3c00, 0x4000); // f16 1, 2
  reduceFast('sum', 'f16', a, Uint16Array.of(0x3c00, 0x3c00));
  assert.deepEqual([...a], [0x4000, 0x4200]); // 2, 3
  const s = Float32Array.of(1, -0);
  reduceFast('max', 'f32', s, Float32Array.of(2, 0));
  assert.deepEqual([...s], [2, 0]);
  assert.ok(Object.is(s[1], 0));
  assert.throws(() => reduceFast('sum', 'f32', new Float32Array(300), new Float32Array(299)));
  assert.throws(() => reduceFast('sum', 'bf16', new Uint16Array(40), new Uint16Array(39)));
});

test('the flat tree adds in the fixed pairwise order: a subtree sums alike alone or inside the whole, halves in either order', async () => {
  await loadFastReduce();
  const rand = xorshift(4242);
  // values of very different magnitudes, so that a different order gives different bits
  const vec = (n: number): Float32Array =>
    Float32Array.from({ length: n }, () => ((rand() % 2000001) - 1000000) * 2 ** ((rand() % 40) - 20));
  for (const n of [3, 300, 1000]) {
    const p = Array.from({ length: 8 }, () => vec(n));
    const add = (a: Float32Array, b: Float32Array): Float32Array =>
      a.map((v, i) => Math.fround(v + (b[i] as number)));
    const spare = [new Float32Array(n), new Float32Array(n), new Float32Array(n)];
    const sum = (parts: Float32Array[]): Float32Array => {
      const out = new Float32Array(n);
      sumTree(flatTree(parts.length), parts, out, spare);
      return out;
    };
    const [p0, p1, p2, p3, p4, p5, p6, p7] = p as [
      Float32Array,
      Float32Array,
      Float32Array,
      Float32Array,
      Float32Array,
      Float32Array,
      Float32Array,
      Float32Array,
    ];
    assert.deepEqual(sum([p0]), p0);
    assert.deepEqual(sum([p0, p1, p2]), add(add(p0, p1), p2));
    assert.deepEqual(sum([p0, p1, p2, p3]), add(add(p0, p1), add(p2, p3)));
    const eight = sum(p);
    assert.deepEqual(eight, add(add(add(p0, p1), add(p2, p3)), add(add(p4, p5), add(p6, p7))));
    // the ranks of a 2- or 4-way split each sum their own subtree, then the group sums those
    assert.deepEqual(sum([sum([p0, p1, p2, p3]), sum([p4, p5, p6, p7])]), eight);
    assert.deepEqual(sum([sum([p0, p1]), sum([p2, p3]), sum([p4, p5]), sum([p6, p7])]), eight);
    assert.deepEqual(
      sum([sum([p4, p5, p6, p7]), sum([p0, p1, p2, p3])]),
      eight,
      'the two halves in the other order',
    );
    // ... which a sum in rank order is not (the test's values make the orders differ)
    assert.notDeepEqual(p.slice(1).reduce(add, p0), eight);
    // out may be the first part
    const first = p0.slice();
    sumTree(flatTree(4), [first, p1, p2, p3], first, spare);
    assert.deepEqual(first, add(add(p0, p1), add(p2, p3)));
  }
  assert.throws(
    () =>
      sumTree(
        flatTree(4),
        [new Float32Array(4), new Float32Array(4), new Float32Array(4), new Float32Array(4)],
        new Float32Array(4),
        [],
      ),
    /spare buffer/,
  );
});

test('sumTree: a nested tree sums alike from its leaves or from the sums of any of its subtrees', async () => {
  await loadFastReduce();
  const rand = xorshift(777);
  const n = 500;
  const vec = (): Float32Array =>
    Float32Array.from({ length: n }, () => ((rand() % 2000001) - 1000000) * 2 ** ((rand() % 40) - 20));
  const add = (a: Float32Array, b: Float32Array): Float32Array =>
    a.map((v, i) => Math.fround(v + (b[i] as number)));
  const p = Array.from({ length: 6 }, vec);
  const sum = (tree: SumTree, parts: Float32Array[]): Float32Array => {
    const out = new Float32Array(n);
    sumTree(
      tree,
      parts,
      out,
      Array.from({ length: treeSpares(tree) }, () => new Float32Array(n)),
    );
    return out;
  };
  // the leaf tree of 32 heads cut for 2, 4 and 3 ranks: ((l0 + (l1 + l2)) + ((l3 + l4) + l5))
  const tree: SumTree = [
    [0, [1, 2]],
    [[3, 4], 5],
  ];
  const [p0, p1, p2, p3, p4, p5] = p as [
    Float32Array,
    Float32Array,
    Float32Array,
    Float32Array,
    Float32Array,
    Float32Array,
  ];
  const whole = sum(tree, p);
  assert.deepEqual(whole, add(add(p0, add(p1, p2)), add(add(p3, p4), p5)));
  // ranks holding [l0 l1 l2], [l3 l4] and [l5] each send the subtree they hold; the group adds them in the tree's top
  const a = sum([0, [1, 2]], [p0, p1, p2]);
  const b = sum([0, 1], [p3, p4]);
  assert.deepEqual(sum([0, [1, 2]], [a, b, p5]), whole);
  // ... but not in the flat order of the three
  assert.notDeepEqual(flatSumOf([a, b, p5]), whole);
  // four children in pairs are the flat tree of 4
  assert.deepEqual(
    sum(
      [
        [0, 1],
        [2, 3],
      ],
      p.slice(0, 4),
    ),
    flatSumOf(p.slice(0, 4)),
  );
  assert.equal(treeSpares(tree), 1);
  assert.equal(
    treeSpares([
      [0, 1],
      [
        [2, 3],
        [4, 5],
      ],
    ]),
    2,
  );
  assert.equal(treeSpares([0, 1, 2]), 0);
  assert.equal(treeSpares(flatTree(4)), 1);
  assert.equal(treeSpares(3), 0, 'a lone part');
  assert.throws(() => sumTree(tree, p, new Float32Array(n), []), /spare buffer/);
});

function flatSumOf(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts[0]!.length);
  sumTree(flatTree(parts.length), parts, out, [new Float32Array(out.length), new Float32Array(out.length)]);
  return out;
}
