/**
 * Proof that generated model files are what llama.cpp expects: each architecture and file
 * type loads in llama.cpp (node-llama-cpp, in a child process because llama.cpp asserts by
 * killing the process), tokenizes with our vocabularies, and gives finite logits; and each
 * quantized file gives the same logits as its F32 twin holding the dequantized weights,
 * which only holds if our block layouts are ggml's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModel, planFor, type MakeModelOptions } from './make-model.js';
import { modelShapes, type FileTypeName } from './model-plan.js';
import { writeF32Twin } from './model-twin.js';
import { bytesToUnicode } from './vocab.js';
import type { ProbeResult } from './llama-cpp-probe.js';

const TEXT = 'The harbor town woke slowly, and the café opened at 6.\nQuick: 42 jars!';
const shape = { ...modelShapes.tiny!, vocab: 1024 };
const PROBE_TIMEOUT_MS = 240_000;

interface Case {
  file: string;
  o: MakeModelOptions;
  twinOf?: string;
  /** The twin's weights come from another seed: its logits must NOT match (the check can fail). */
  wrong?: boolean;
}

function probe(files: string[]): Promise<ProbeResult[]> {
  const script = join(import.meta.dirname, 'llama-cpp-probe.ts');
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', script, JSON.stringify({ files, text: TEXT })],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), PROBE_TIMEOUT_MS);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const results = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as ProbeResult);
      if (results.length !== files.length)
        reject(
          new Error(
            `probe exited (${code ?? signal}) after ${results.length}/${files.length} files: ${err.slice(-2000)}`,
          ),
        );
      else resolve(results);
    });
  });
}

function compare(a: number[], b: number[]): { maxDiff: number; corr: number } {
  let maxDiff = 0;
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as number;
    const y = b[i] as number;
    maxDiff = Math.max(maxDiff, Math.abs(x - y));
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return { maxDiff, corr: dot / Math.sqrt(na * nb) };
}

/** Our own decoding of token ids through the vocabulary we wrote. */
function decode(tokens: readonly number[], o: MakeModelOptions): string {
  const v = planFor(o).vocab;
  const pieces = tokens.map((t) => v.tokens[t] as string);
  if (v.model === 'gpt2') {
    const u2b = new Map(bytesToUnicode().map((c, b) => [c, b]));
    return Buffer.from(Array.from(pieces.join(''), (c) => u2b.get(c) as number)).toString('utf8');
  }
  const bytes: number[] = [];
  for (const p of pieces) {
    const m = /^<0x([0-9A-F]{2})>$/.exec(p);
    if (m) bytes.push(parseInt(m[1] as string, 16));
    else bytes.push(...Buffer.from(p.replaceAll('▁', ' ')));
  }
  return Buffer.from(bytes).toString('utf8').replace(/^ /, '');
}

test(
  'generated models load, tokenize and run in llama.cpp; quantized layouts match ggml',
  { timeout: 280_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-llama-'));
    try {
      const cases: Case[] = [];
      const add = (name: string, o: MakeModelOptions): string => {
        const file = join(dir, `${name}.gguf`);
        cases.push({ file, o });
        return file;
      };
      const types: FileTypeName[] = ['f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_k_m', 'q5_k_m', 'q6_k'];
      for (const type of types) add(`llama-${type}`, { arch: 'llama', shape, type });
      for (const arch of ['qwen2', 'qwen3', 'moe', 'qwen2moe', 'qwen3moe'] as const)
        add(`${arch}-q8_0`, { arch, shape, type: 'q8_0' });
      add('qwen3-tied-q4_k_m', { arch: 'qwen3', shape, type: 'q4_k_m', tied: true });
      add('llama-bpe-q8_0', { arch: 'llama', shape, type: 'q8_0', vocab: 'bpe' });
      add('qwen3moe-q4_k_m', { arch: 'qwen3moe', shape, type: 'q4_k_m' });
      add('llama-rope-llama3-f32', { arch: 'llama', shape, type: 'f32', ropeScaling: 'llama3' });
      const twins: Case[] = [];
      // Twins for every llama file type, and for 3-D expert tensors in a k-quant mix.
      const twinned = cases.filter(
        (c) =>
          (c.o.arch === 'llama' && c.o.vocab === undefined && c.o.type !== 'f32') ||
          c.file.endsWith('qwen3moe-q4_k_m.gguf'),
      );
      for (const c of twinned)
        twins.push({ file: c.file.replace('.gguf', '-twin.gguf'), o: c.o, twinOf: c.file });
      const q4 = cases.find((c) => c.file.endsWith('llama-q4_k_m.gguf'))!;
      twins.push({
        file: join(dir, 'wrong-twin.gguf'),
        o: { ...q4.o, seed: 1 },
        twinOf: q4.file,
        wrong: true,
      });
      for (const c of cases) await makeModel(c.file, c.o);
      for (const t of twins) await writeF32Twin(t.file, t.o);

      const all = [...cases, ...twins];
      const results = await probe(all.map((c) => c.file));
      const byFile = new Map(results.map((r) => [r.file, r]));
      for (const c of cases) {
        const r = byFile.get(c.file)!;
        assert.ok(r.ok, `${c.file}: llama.cpp failed: ${r.error}`);
        assert.equal(r.detokenized, TEXT, c.file);
        assert.equal(decode(r.tokens!, c.o), TEXT, `${c.file}: token ids do not index our vocabulary`);
        assert.ok(
          r.tokens!.length < TEXT.length,
          `${c.file}: ${r.tokens!.length} tokens, merges are not applied`,
        );
        assert.equal(r.vocabSize, shape.vocab);
        assert.ok(r.logits!.every(Number.isFinite), `${c.file}: non-finite logits`);
        const spread = Math.max(...r.logits!) - Math.min(...r.logits!);
        assert.ok(spread > 0.1 && spread < 100, `${c.file}: logits spread ${spread}`);
      }
      for (const t of twins) {
        const q = byFile.get(t.twinOf!)!;
        const f = byFile.get(t.file)!;
        assert.ok(f.ok, `${t.file}: ${f.error}`);
        const { maxDiff, corr } = compare(q.logits!, f.logits!);
        if (t.wrong) {
          assert.ok(corr < 0.9, `logits of different weights correlate at ${corr}`);
          continue;
        }
        // llama.cpp quantizes activations for quantized matmuls (~1e-2 noise). F16 weights are
        // exact, but depending on the CPU llama.cpp rounds the activations to f16 for them
        // (2^-11 relative): under 1e-4 on an Intel Xeon, 9e-4 on an AMD EPYC with AVX512-BF16.
        // A misplaced block or row differs by whole units, as the wrong-seed twin shows.
        const tol = t.o.type === 'f16' ? 4e-3 : 0.06;
        assert.ok(corr > 0.999, `${t.twinOf}: correlation with its F32 twin ${corr}`);
        assert.ok(maxDiff < tol, `${t.twinOf}: max logit difference to its F32 twin ${maxDiff} >= ${tol}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
