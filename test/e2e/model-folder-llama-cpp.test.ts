// Proof against llama.cpp for model folders: a generated model is written out as a Hugging
// Face folder (F32, sharded; BF16) and as an MLX 4-bit folder, `convertFolder` writes each as
// GGUF, and llama.cpp (node-llama-cpp, in a child process) must tokenize the text as tandem
// does and pick the same greedy tokens from the converted file as tandem picks from the
// folder itself and from the converted file.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createKernels, type Kernels } from '../../src/kernels/index.js';
import { convertFolder } from '../../src/engine/format/convert-folder.js';
import { makeModel, type MakeModelOptions } from '../../src/engine/format/make-model.js';
import { modelShapes } from '../../src/engine/format/model-plan.js';
import type { ProbeResult } from '../../src/engine/format/llama-cpp-probe.js';
import { GgufModelFile } from '../../src/engine/model/gguf-model-file.js';
import { Model } from '../../src/engine/model/model.js';
import { writeHfFolder, type HfExportOptions } from '../../src/engine/testing/hf-folder.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../../src/engine/tokenizer/index.js';
import { runLlamaCpp } from './llama-cpp-oracle.js';

const STEPS = 16;
const TEXT = 'The harbor town woke slowly, and the café opened at 6. Quick: 42 jars!';
const shape = { ...modelShapes.tiny!, vocab: 1024 };

interface Case {
  name: string;
  made: Omit<MakeModelOptions, 'shape'>;
  folder: HfExportOptions;
}

const cases: Case[] = [
  {
    name: 'llama F32, SentencePiece, 2 shards',
    made: { arch: 'llama', type: 'f32' },
    folder: { dtype: 'F32', shards: 2 },
  },
  { name: 'qwen2 BF16, byte-level BPE', made: { arch: 'qwen2', type: 'f32' }, folder: { dtype: 'BF16' } },
  {
    name: 'llama MLX 4-bit (F16 after conversion)',
    made: { arch: 'llama', type: 'f32', vocab: 'bpe' },
    folder: { dtype: 'F16', mlx: { bits: 4, groupSize: 64 } },
  },
];

let llamaCpp: string | undefined;
try {
  await import('node-llama-cpp');
} catch (error) {
  llamaCpp = `node-llama-cpp is not installed (${(error as Error).message.split('\n')[0]}); install the dev dependencies to run this oracle`;
}

function probe(file: string): Promise<ProbeResult> {
  const script = join(import.meta.dirname, '..', '..', 'src', 'engine', 'format', 'llama-cpp-probe.ts');
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', script, JSON.stringify({ files: [file], text: TEXT })],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve(JSON.parse(line) as ProbeResult);
      else reject(new Error(`llama.cpp probe exited with ${code}: ${err.slice(-2000)}`));
    });
  });
}

async function greedy(kernels: Kernels, path: string, prompt: number[]): Promise<number[]> {
  const file = GgufModelFile.open(path);
  try {
    const model = await Model.load(file, kernels);
    const cache = model.newSession();
    const out: number[] = [];
    let logits = await model.forward(prompt, cache);
    for (let s = 0; s < STEPS; s++) {
      let best = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
      out.push(best);
      logits = await model.forward([best], cache);
    }
    return out;
  } finally {
    file.close();
  }
}

describe('model folders against llama.cpp', { skip: llamaCpp }, () => {
  let dir = '';
  let kernels: Kernels;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tandem-folder-llama-'));
    kernels = await createKernels({ threads: 1 });
  });
  after(async () => {
    await kernels?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const c of cases) {
    it(`${c.name}: llama.cpp on the converted GGUF gives tandem's tokens and greedy tokens`, async () => {
      const base = join(dir, c.name.replace(/\W+/g, '-'));
      await makeModel(`${base}.gguf`, { ...c.made, shape, seed: 5 });
      const folder = `${base}-folder`;
      writeHfFolder(`${base}.gguf`, folder, c.folder);
      const converted = `${base}-converted.gguf`;
      await convertFolder(folder, converted);

      const opened = GgufModelFile.open(folder);
      const tokenizer = new Tokenizer(tokenizerMetadataFromGguf(opened.gguf.metadata.entries));
      opened.close();
      const ids = tokenizer.encode(TEXT, { addBos: false });
      const seen = await probe(converted);
      assert.ok(seen.ok, `llama.cpp did not load ${converted}: ${seen.error}`);
      assert.deepEqual(seen.tokens, ids, 'llama.cpp tokenizes the text as tandem does');

      const prompt = tokenizer.encode(TEXT, { addBos: true });
      const fromFolder = await greedy(kernels, folder, prompt);
      const fromGguf = await greedy(kernels, converted, prompt);
      const [oracle] = await runLlamaCpp(
        [{ modelPath: converted, prompt, steps: STEPS, vocabSize: shape.vocab, contextSize: 128 }],
        240_000,
      );
      assert.deepEqual(fromGguf, fromFolder, 'tandem: converted GGUF = folder');
      assert.deepEqual(
        oracle!.greedy,
        fromFolder,
        'llama.cpp greedy on the converted GGUF = tandem on the folder',
      );
    });
  }
});
