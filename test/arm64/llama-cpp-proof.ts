// The llama.cpp proof on the arm64 build, run by `npm run test:arm64` under qemu-aarch64
// (not a *.test.ts: the x86 suite runs the full proof, test/e2e/llama-cpp-engine.test.ts).
// Tiny random-weight llama models written as GGUF here, one per weight type whose kernels
// differ on NEON, run through tandem's engine on the native (NEON) kernels and through
// node-llama-cpp's prebuilt linux-arm64 llama.cpp (in a child Node, F32 KV cache): llama.cpp's
// greedy tokens fed back for 32 steps, ours must pick the same at every step, and every step's
// logits agree within the tolerance stated per type (the e2e test's rules and tolerances).
// The oracle gets 20 minutes: emulated, it is 10-50x slower than on the host.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createKernels, type Kernels } from '../../src/kernels/index.js';
import { GgufModelFile } from '../../src/engine/model/gguf-model-file.js';
import { Model } from '../../src/engine/model/model.js';
import { writeTinyGguf, type WeightTypeName } from '../e2e/llama-cpp-models.js';
import { runLlamaCpp, type OracleAnswer } from '../e2e/llama-cpp-oracle.js';
import { assertAgreesWithLlamaCpp } from '../e2e/llama-cpp-compare.js';

const STEPS = 32;
// 20 tokens: prefill runs the GEMM kernels (12 tokens and more), decode the matvec ones.
const PROMPT = [5, 77, 301, 12, 260, 9, 488, 143, 33, 401, 7, 250, 61, 199, 3, 444, 120, 18, 305, 91];
const shape = { vocab: 512, width: 256, layers: 2, heads: 4, kvHeads: 2, ff: 512, context: 128 };
/** As in test/e2e/llama-cpp-engine.test.ts (which says where each figure comes from). */
const tolerance: Partial<Record<WeightTypeName, number>> = {
  F32: 1e-4,
  F16: 2e-3,
  Q8_0: 3e-2,
  Q4_0: 3e-2,
  Q4_K: 3e-2,
  Q6_K: 3e-2,
};
const types = Object.keys(tolerance) as WeightTypeName[];

describe('arm64: engine on the NEON kernels against llama.cpp (linux-arm64 build)', () => {
  let dir: string;
  let kernels: Kernels;
  const answers = new Map<WeightTypeName, OracleAnswer>();

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tandem-arm64-proof-'));
    kernels = await createKernels({ backend: 'native', threads: 1 });
    const jobs = types.map((type, i) => {
      const path = join(dir, `${type}.gguf`);
      const vocabSize = writeTinyGguf(path, { arch: 'llama', ...shape, seed: 300 + i }, type);
      return { modelPath: path, prompt: PROMPT, steps: STEPS, vocabSize, contextSize: 64 };
    });
    const results = await runLlamaCpp(jobs, 20 * 60_000);
    types.forEach((type, i) => answers.set(type, results[i]!));
  });

  after(async () => {
    await kernels?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const type of types) {
    it(`llama ${type}: ${STEPS} greedy tokens identical, logits within ${tolerance[type]}`, async () => {
      const tol = tolerance[type]!;
      const answer = answers.get(type)!;
      const file = GgufModelFile.open(join(dir, `${type}.gguf`));
      try {
        const model = await Model.load(file, kernels);
        await assertAgreesWithLlamaCpp(model, answer, {
          prompt: PROMPT,
          steps: STEPS,
          tolerance: tol,
          exact: type === 'F32',
          varied: true,
        });
      } finally {
        file.close();
      }
    });
  }
});
