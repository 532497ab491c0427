import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { reduceInto, reduceOps } from './reduce.js';
import { flatTree, loadNativeReduce, nativeReduceLoaded, nativeReduceReason, reduceFast, sumTree, treeSpares, type SumTree } from './reduce-native.js';

function hasCompiler(): boolean {
  try {
    execFileSync(process.env.CC ?? 'cc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return s >>> 0;
  };
}

/** f32 bit patterns with NaNs (several payloads), infinities, +-0, subnormals and equal pairs mixed in. */
function f32Bits(rand: () => number, n: number, partner?: Uint32Array): Uint32Array {
  const special = [0x7fc00000, 0xffc00000, 0x7fa00001, 0x7f800000, 0xff800000, 0, 0x80000000, 1, 0x80000001, 0x3f800000];
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const r = rand() % 16;
    if (r < 3) out[i] = special[rand() % special.length] as number;
    else if (r === 3 && partner) out[i] = partner[i] as number;
    else out[i] = rand();
  }
  return out;
}

test('the native reduce kernels build here when a C compiler is present', async () => {
  const ok = await loadNativeReduce();
  if (process.env.TANDEM_NATIVE_REDUCE === '0' || !hasCompiler()) assert.equal(ok, false);
  else assert.equal(ok, true, nativeReduceReason);
  assert.equal(nativeReduceLoaded(), ok);
});

test('native f32 reductions equal reduce.ts bit for bit (NaN, -0, inf, subnormals; odd lengths and offsets)', async () => {
  await loadNativeReduce();
  const rand = xorshift(12345);
  for (const op of reduceOps) {
    for (const n of [256, 257, 1000, 4099]) {
      for (const offset of [0, 1, 3]) {
        const b = f32Bits(rand, n + offset);
        const a = f32Bits(rand, n + offset, b);
        const ref = new Float32Array(a.slice().buffer).subarray(offset);
        const got = new Float32Array(a.slice().buffer).subarray(offset);
        const other = new Float32Array(b.buffer).subarray(offset);
        reduceInto(op, 'f32', ref, other);
        reduceFast(op, 'f32', got, other);
        const rb = new Uint32Array(ref.buffer, ref.byteOffset, n);
        const gb = new Uint32Array(got.buffer, got.byteOffset, n);
        for (let i = 0; i < n; i++) {
          const bothNaN = Number.isNaN(new Float32Array(a.buffer)[offset + i]) && Number.isNaN(other[i]);
          // two NaN operands of a sum: either payload is IEEE-correct (V8 and C differ in operand order)
          if (op === 'sum' && bothNaN) assert.ok(Number.isNaN(got[i]), `${op} n=${n} #${i}`);
          else assert.equal(gb[i], rb[i], `${op} n=${n} offset=${offset} #${i}: ${(a[offset + i] as number).toString(16)} ${(b[offset + i] as number).toString(16)}`);
        }
      }
    }
  }
});

test('native i32 reductions equal reduce.ts (sum wraps modulo 2^32)', async () => {
  await loadNativeReduce();
  const rand = xorshift(777);
  for (const op of reduceOps) {
    for (const n of [256, 999, 5000]) {
      const a = new Int32Array(n).map(() => rand() | 0);
      const b = new Int32Array(n).map(() => (rand() % 4 === 0 ? 0x7fffffff : rand() | 0));
      const ref = a.slice();
      reduceInto(op, 'i32', ref, b);
      reduceFast(op, 'i32', a, b);
      assert.deepEqual(a, ref, `${op} n=${n}`);
    }
  }
});

test('reduceFast falls back to reduce.ts for f16/bf16 and short arrays, and checks lengths', async () => {
  await loadNativeReduce();
  const a = Uint16Array.of(0x3c00, 0x4000); // f16 1, 2
  reduceFast('sum', 'f16', a, Uint16Array.of(0x3c00, 0x3c00));
  assert.deepEqual([...a], [0x4000, 0x4200]); // 2, 3
  const s = Float32Array.of(1, -0);
  reduceFast('max', 'f32', s, Float32Array.of(2, 0));
  assert.deepEqual([...s], [2, 0]);
  assert.ok(Object.is(s[1], 0));
  assert.throws(() => reduceFast('sum', 'f32', new Float32Array(300), new Float32Array(299)));
});

test('the flat tree adds in the fixed pairwise order: a subtree sums alike alone or inside the whole, halves in either order', async () => {
  await loadNativeReduce();
  const rand = xorshift(4242);
  // values of very different magnitudes, so that a different order gives different bits
  const vec = (n: number): Float32Array => Float32Array.from({ length: n }, () => ((rand() % 2000001) - 1000000) * 2 ** ((rand() % 40) - 20));
  for (const n of [3, 300, 1000]) {
    const p = Array.from({ length: 8 }, () => vec(n));
    const add = (a: Float32Array, b: Float32Array): Float32Array => a.map((v, i) => Math.fround(v + (b[i] as number)));
    const spare = [new Float32Array(n), new Float32Array(n), new Float32Array(n)];
    const sum = (parts: Float32Array[]): Float32Array => {
      const out = new Float32Array(n);
      sumTree(flatTree(parts.length), parts, out, spare);
      return out;
    };
    const [p0, p1, p2, p3, p4, p5, p6, p7] = p as [Float32Array, Float32Array, Float32Array, Float32Array, Float32Array, Float32Array, Float32Array, Float32Array];
    assert.deepEqual(sum([p0]), p0);
    assert.deepEqual(sum([p0, p1, p2]), add(add(p0, p1), p2));
    assert.deepEqual(sum([p0, p1, p2, p3]), add(add(p0, p1), add(p2, p3)));
    const eight = sum(p);
    assert.deepEqual(eight, add(add(add(p0, p1), add(p2, p3)), add(add(p4, p5), add(p6, p7))));
    // the ranks of a 2- or 4-way split each sum their own subtree, then the group sums those
    assert.deepEqual(sum([sum([p0, p1, p2, p3]), sum([p4, p5, p6, p7])]), eight);
    assert.deepEqual(sum([sum([p0, p1]), sum([p2, p3]), sum([p4, p5]), sum([p6, p7])]), eight);
    assert.deepEqual(sum([sum([p4, p5, p6, p7]), sum([p0, p1, p2, p3])]), eight, 'the two halves in the other order');
    // ... which a sum in rank order is not (the test's values make the orders differ)
    assert.notDeepEqual(p.slice(1).reduce(add, p0), eight);
    // out may be the first part
    const first = p0.slice();
    sumTree(flatTree(4), [first, p1, p2, p3], first, spare);
    assert.deepEqual(first, add(add(p0, p1), add(p2, p3)));
  }
  assert.throws(() => sumTree(flatTree(4), [new Float32Array(4), new Float32Array(4), new Float32Array(4), new Float32Array(4)], new Float32Array(4), []), /spare buffer/);
});

test('sumTree: a nested tree sums alike from its leaves or from the sums of any of its subtrees', async () => {
  await loadNativeReduce();
  const rand = xorshift(777);
  const n = 500;
  const vec = (): Float32Array => Float32Array.from({ length: n }, () => ((rand() % 2000001) - 1000000) * 2 ** ((rand() % 40) - 20));
  const add = (a: Float32Array, b: Float32Array): Float32Array => a.map((v, i) => Math.fround(v + (b[i] as number)));
  const p = Array.from({ length: 6 }, vec);
  const sum = (tree: SumTree, parts: Float32Array[]): Float32Array => {
    const out = new Float32Array(n);
    sumTree(tree, parts, out, Array.from({ length: treeSpares(tree) }, () => new Float32Array(n)));
    return out;
  };
  // the leaf tree of 32 heads cut for 2, 4 and 3 ranks: ((l0 + (l1 + l2)) + ((l3 + l4) + l5))
  const tree: SumTree = [[0, [1, 2]], [[3, 4], 5]];
  const [p0, p1, p2, p3, p4, p5] = p as [Float32Array, Float32Array, Float32Array, Float32Array, Float32Array, Float32Array];
  const whole = sum(tree, p);
  assert.deepEqual(whole, add(add(p0, add(p1, p2)), add(add(p3, p4), p5)));
  // ranks holding [l0 l1 l2], [l3 l4] and [l5] each send the subtree they hold; the group adds them in the tree's top
  const a = sum([0, [1, 2]], [p0, p1, p2]);
  const b = sum([0, 1], [p3, p4]);
  assert.deepEqual(sum([0, [1, 2]], [a, b, p5]), whole);
  // ... but not in the flat order of the three
  assert.notDeepEqual(flatSumOf([a, b, p5]), whole);
  // four children in pairs are the flat tree of 4
  assert.deepEqual(sum([[0, 1], [2, 3]], p.slice(0, 4)), flatSumOf(p.slice(0, 4)));
  assert.equal(treeSpares(tree), 1);
  assert.equal(treeSpares([[0, 1], [[2, 3], [4, 5]]]), 2);
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
