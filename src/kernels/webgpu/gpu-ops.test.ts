import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { ReferenceKernels } from '../reference.js';
import { GgmlType, type GgmlTypeId, type RopeParams } from '../types.js';
import { randomFloats, randomWeightBytes } from '../testing/random-weights.js';
import { attentionRef, ropeAngles, rmsNormRef, ropeRef, softmaxRef, swigluRef } from '../ref/ops-ref.js';
import { isTandemError } from '../../errors/index.js';
import { probeAdapter } from './adapter.js';
import { GpuDevice } from './gpu-device.js';
import { GpuOps } from './gpu-ops.js';
import { uploadGpuWeight } from './gpu-weights.js';

/**
 * The WGSL kernels against the TypeScript reference twin on random inputs (fixed seeds).
 * Matmuls: the activation goes to the same dot type and the same integers are summed per
 * block; only the float accumulation differs (f32 tree sums here, f64 in the twin), so
 * results agree to TOL relative to the output's magnitude. Element-wise kernels use the
 * GPU's exp/sqrt (a few ulp), held to the same TOL.
 */
const TOL = 5e-5;
const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;
const gpu = probe.found ? await GpuDevice.open() : undefined;
const ops = gpu ? new GpuOps(gpu) : undefined;
after(() => {
  ops?.destroy();
  gpu?.destroy();
});

function assertClose(got: Float32Array, want: Float32Array, tol: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let mag = 0;
  for (const v of want) mag = Math.max(mag, Math.abs(v));
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs((got[i] as number) - (want[i] as number));
    if (!(d <= tol * mag + 1e-7))
      assert.fail(`${what}: element ${i}: ${got[i]} vs ${want[i]} (|diff| ${d}, magnitude ${mag})`);
  }
}

const put = (x: Float32Array, label: string): GPUBuffer => (gpu as GpuDevice).upload(x, label);
const get = (b: GPUBuffer, floats: number): Promise<Float32Array> => (gpu as GpuDevice).read(b, 4 * floats);

const types: [string, GgmlTypeId][] = [
  ['F32', GgmlType.F32],
  ['F16', GgmlType.F16],
  ['Q8_0', GgmlType.Q8_0],
  ['Q4_0', GgmlType.Q4_0],
  ['Q4_K', GgmlType.Q4_K],
  ['Q5_K', GgmlType.Q5_K],
  ['Q6_K', GgmlType.Q6_K],
];

test(
  'webgpu: matvec and matmul match the reference for F32, F16, Q8_0, Q4_0 and the K-quants',
  { skip },
  async () => {
    const ref = new ReferenceKernels();
    const g = gpu as GpuDevice;
    for (const [name, type] of types) {
      // K-quant rows are whole 256-element super-blocks
      const wide = name.endsWith('_K') ? 4 : 1;
      for (const [rows, narrow, n] of [
        [7, 64, 1],
        [70, 256, 3],
      ] as const) {
        const cols = narrow * wide;
        const data = randomWeightBytes(type, rows, cols, rows + cols);
        const wr = ref.uploadWeight({ type, rows, cols, data });
        const wg = uploadGpuWeight(g, { type, rows, cols, data, name });
        // n = 3 at 1e-5: f16's subnormal range, where rounding x to f16 needs its own path
        const x = randomFloats(n * cols, 11 + n, n === 3 ? 1e-5 : 1);
        const want = new Float32Array(n * rows);
        ref.matmul(wr, x, want, n);
        const y = g.storage(4 * n * rows, 'y');
        ops?.matmul(wg, put(x, 'x'), y, n);
        assertClose(await get(y, n * rows), want, TOL, `${name} ${rows}x${cols} n=${n}`);
      }
    }
  },
);

test(
  'webgpu: the tiled prefill matmul gives each token the bits of its own per-row workgroup',
  { skip },
  async () => {
    const g = gpu as GpuDevice;
    for (const [name, type] of types) {
      // 70 rows and 13 tokens: partial tiles in both directions
      const [rows, n] = [70, 13];
      const cols = name.endsWith('_K') ? 512 : 96;
      const data = randomWeightBytes(type, rows, cols, 3 * rows + cols);
      const wg = uploadGpuWeight(g, { type, rows, cols, data, name });
      const xb = put(randomFloats(n * cols, 31), 'x');
      const tiled = g.storage(4 * n * rows, 'tiled');
      const perRow = g.storage(4 * n * rows, 'per row');
      ops?.matmul(wg, xb, tiled, n);
      ops?.matmul(wg, xb, perRow, n, rows, 0, true);
      const a = await get(tiled, n * rows);
      const b = await get(perRow, n * rows);
      for (let i = 0; i < a.length; i++)
        if (!Object.is(a[i], b[i])) assert.fail(`${name}: output ${i}: tiled ${a[i]}, per row ${b[i]}`);
    }
  },
);

test(
  'webgpu: a weight larger than one binding is cut into row chunks with the same results',
  { skip },
  async () => {
    const g = gpu as GpuDevice;
    const ref = new ReferenceKernels();
    const [rows, cols] = [40, 64];
    const data = randomWeightBytes(GgmlType.Q8_0, rows, cols, 5);
    const limits = g.limits;
    // a device whose bindings hold 16 rows of this weight (16 * 72 bytes)
    const small = Object.create(g, { maxBinding: { value: 16 * 72 } }) as GpuDevice;
    const wg = uploadGpuWeight(small, { type: GgmlType.Q8_0, rows, cols, data, name: 'chunked' });
    assert.equal(wg.chunks.length, 3);
    assert.equal(limits, g.limits);
    const x = randomFloats(cols, 3);
    const want = new Float32Array(rows);
    ref.matvec(ref.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data }), x, want);
    const y = g.storage(4 * rows, 'y');
    ops?.matmul(wg, put(x, 'x'), y, 1);
    assertClose(await get(y, rows), want, TOL, 'chunked Q8_0');
  },
);

test(
  'webgpu: MoE routing (softmax, top-k, slot lists), a listed expert matmul and the combine match their twins',
  { skip },
  async () => {
    const g = gpu as GpuDevice;
    const [n, experts, used, cols, rows] = [5, 8, 3, 64, 6];
    const logits = randomFloats(n * experts, 41, 2);
    // expert 2 and 5 tie exactly on token 0: the lower id goes first
    logits[2] = logits[5] = 9;
    const route = {
      probs: put(logits, 'probs'),
      ids: g.storage(4 * n * used, 'ids'),
      weights: g.storage(4 * n * used, 'weights'),
      lists: g.storage(4 * (experts + experts * n), 'lists'),
      experts,
      used,
    };
    ops?.routeTopK(route, n, true);
    const probs = logits.slice();
    softmaxRef(probs, n, experts);
    const wantIds: number[] = [];
    const wantW: number[] = [];
    for (let t = 0; t < n; t++) {
      const row = Array.from(probs.subarray(t * experts, (t + 1) * experts));
      const order = row.map((p, e) => [p, e] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
      const top = order.slice(0, used);
      const sum = top.reduce((acc, [p]) => acc + p, 0);
      for (const [p, e] of top) {
        wantIds.push(e);
        wantW.push(p / sum);
      }
    }
    const ids = new Uint32Array((await get(route.ids, n * used)).buffer);
    assert.deepEqual([...ids], wantIds);
    assertClose(await get(route.weights, n * used), Float32Array.from(wantW), 1e-6, 'routing weights');
    const lists = new Uint32Array((await get(route.lists, experts + experts * n)).buffer);
    for (let e = 0; e < experts; e++) {
      const slots = wantIds.flatMap((id, s) => (id === e ? [s] : []));
      assert.deepEqual([...lists.subarray(experts + e * n, experts + e * n + slots.length)], slots);
      assert.equal(lists[e], slots.length, `expert ${e}'s count`);
    }
    // expert 2's F32 matmul over its slots: y[s] = W x[s / used]; other slots untouched (zero)
    const ref = new ReferenceKernels();
    const data = randomWeightBytes(GgmlType.F32, rows, cols, 43);
    const w = uploadGpuWeight(g, { type: GgmlType.F32, rows, cols, data, name: 'expert 2' });
    const x = randomFloats(n * cols, 44);
    const y = g.storage(4 * n * used * rows, 'slots');
    ops?.matmulListed(w, put(x, 'x'), y, n, 2, route, used);
    const got = await get(y, n * used * rows);
    const wr = ref.uploadWeight({ type: GgmlType.F32, rows, cols, data });
    for (let s = 0; s < n * used; s++) {
      const want = new Float32Array(rows);
      if (wantIds[s] === 2)
        ref.matvec(wr, x.subarray(((s / used) | 0) * cols, ((s / used) | 0) * cols + cols), want);
      assertClose(got.subarray(s * rows, (s + 1) * rows), want, TOL, `slot ${s}`);
    }
    // the combine: each token's slots weighted, in ascending expert id
    const slots = randomFloats(n * used * rows, 45);
    const out = g.storage(4 * n * rows, 'combined');
    ops?.combine(route, put(slots, 'slot outputs'), out, n, rows);
    const want = new Float32Array(n * rows);
    for (let t = 0; t < n; t++) {
      const js = [0, 1, 2].sort((a, b) => wantIds[t * used + a]! - wantIds[t * used + b]!);
      for (let i = 0; i < rows; i++)
        for (const j of js)
          want[t * rows + i] = want[t * rows + i]! + wantW[t * used + j]! * slots[(t * used + j) * rows + i]!;
    }
    assertClose(await get(out, n * rows), want, 1e-6, 'combine');
  },
);

test('webgpu: rmsNorm, swiglu and add match the reference', { skip }, async () => {
  const g = gpu as GpuDevice;
  const [n, dim] = [3, 300];
  const x = randomFloats(n * dim, 1);
  const w = randomFloats(dim, 2);
  const want = new Float32Array(n * dim);
  rmsNormRef(x, w, 1e-5, want, n);
  const out = g.storage(4 * n * dim, 'out');
  ops?.rmsNorm(put(x, 'x'), put(w, 'w'), 1e-5, out, n, dim);
  assertClose(await get(out, n * dim), want, TOL, 'rmsNorm');

  const gate = randomFloats(1000, 3, 4);
  const up = randomFloats(1000, 4);
  const sw = new Float32Array(1000);
  swigluRef(gate, up, sw);
  const so = g.storage(4000, 'swiglu');
  ops?.swiglu(put(gate, 'gate'), put(up, 'up'), so, 1000);
  assertClose(await get(so, 1000), sw, TOL, 'swiglu');

  const xb = put(gate, 'x');
  ops?.add(xb, put(up, 'y'), 1000);
  assertClose(
    await get(xb, 1000),
    gate.map((v, i) => v + (up[i] as number)),
    1e-7,
    'add',
  );
});

test('webgpu: rope (normal and neox, freq factors) matches the reference', { skip }, async () => {
  const [n, heads, headDim] = [3, 4, 16];
  for (const style of ['normal', 'neox'] as const) {
    const p: RopeParams = {
      headDim,
      style,
      freqBase: 10000,
      freqScale: 0.5,
      freqFactors: randomFloats(8, 9).map((v) => 1 + Math.abs(v)),
    };
    const positions = Int32Array.from([5, 6, 900]);
    const x = randomFloats(n * heads * headDim, 7);
    const want = x.slice();
    ropeRef(want, positions, heads, p);
    const half = headDim / 2;
    const cs = new Float32Array(2 * n * half);
    for (let t = 0; t < n; t++)
      ropeAngles(
        positions[t] as number,
        p,
        cs.subarray(t * half, (t + 1) * half),
        cs.subarray((n + t) * half, (n + t + 1) * half),
      );
    const xb = put(x, 'x');
    ops?.rope(xb, put(cs, 'cs'), n, heads, headDim, half, style === 'neox');
    assertClose(await get(xb, x.length), want, 1e-6, `rope ${style}`);
  }
});

test(
  'webgpu: attention over a GPU-resident cache (decode and prefill, grouped query) matches the reference',
  { skip },
  async () => {
    const g = gpu as GpuDevice;
    const [heads, kvHeads, hd, maxSeq] = [4, 2, 32, 40];
    const k = randomFloats(maxSeq * kvHeads * hd, 21);
    const v = randomFloats(maxSeq * kvHeads * hd, 22);
    const kb = g.storage(k.byteLength, 'k cache');
    const vb = g.storage(v.byteLength, 'v cache');
    // stores in two steps, as a prefill and then a decode step would
    const split = 30 * kvHeads * hd;
    ops?.copy(put(k.subarray(0, split), 'k0'), kb, split, 0);
    ops?.copy(put(v.subarray(0, split), 'v0'), vb, split, 0);
    ops?.copy(put(k.subarray(split), 'k1'), kb, k.length - split, split);
    ops?.copy(put(v.subarray(split), 'v1'), vb, v.length - split, split);
    for (const [pos0, n] of [
      [0, 7],
      [39, 1],
      [20, 5],
    ] as const) {
      const q = randomFloats(n * heads * hd, 23 + pos0);
      const want = new Float32Array(q.length);
      const scale = 1 / Math.sqrt(hd);
      attentionRef(q, k, v, want, { n, heads, kvHeads, hd, pos0, scale, f16: false });
      const out = g.storage(q.byteLength, 'out');
      const stride = pos0 + n;
      const scores = g.storage(4 * n * heads * stride, 'scores');
      ops?.attention(put(q, 'q'), kb, vb, scores, out, {
        heads,
        kvHeads,
        headDim: hd,
        pos0,
        n,
        stride,
        scale,
      });
      assertClose(await get(out, q.length), want, TOL, `attention pos0=${pos0} n=${n}`);
    }
  },
);

test(
  'webgpu: a kernel the device refuses surfaces as KERNELS_GPU_FAILED at the next read',
  { skip },
  async () => {
    const bad = await GpuDevice.open();
    try {
      const out = bad.storage(16, 'out');
      bad.dispatch('broken', 'fn main() { not wgsl', new Uint32Array(4), [out], [1]);
      await assert.rejects(bad.read(out, 16), (e) => isTandemError(e, 'KERNELS_GPU_FAILED'));
    } finally {
      bad.destroy();
    }
  },
);
