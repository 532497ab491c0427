import { readFile } from 'node:fs/promises';
import { TandemError } from '../../errors/index.js';
import { writeFileAtomically } from '../format/atomic-file.js';
import type { ModelShape } from '../format/model-plan.js';

/**
 * A training checkpoint: everything a resumed run needs to continue with the same bits as an
 * uninterrupted one (weights, both AdamW moments, the update count, the run's settings and
 * the data's fingerprint; each step's batch is a function of seed and step, so no sampler
 * state is kept). Layout: "TNDMCKP1", u32 little-endian JSON length, the JSON header,
 * zero padding to a multiple of 4, then weights, m, v as f32 arrays of `params` values each.
 * Written through a temporary file renamed over the target (a killed write leaves the last
 * checkpoint whole).
 */
export interface RunSettings {
  shapeName: string;
  shape: ModelShape;
  seed: number;
  steps: number;
  batch: number;
  seq: number;
  lr: number;
  warmup: number;
  minLrRatio: number;
  weightDecay: number;
  clip: number;
  /** Token count and FNV-1a hash of the tokenized data: a resumed run must read the same data. */
  dataTokens: number;
  dataHash: string;
}

export interface CurvePoint {
  step: number;
  loss: number;
  lr: number;
}

export interface Checkpoint {
  settings: RunSettings;
  /** Updates done. */
  step: number;
  curve: CurvePoint[];
  weights: Float32Array;
  m: Float32Array;
  v: Float32Array;
}

const MAGIC = 'TNDMCKP1';

export async function saveCheckpoint(path: string, c: Checkpoint): Promise<void> {
  const json = Buffer.from(
    JSON.stringify({
      version: 1,
      settings: c.settings,
      step: c.step,
      curve: c.curve,
      params: c.weights.length,
    }),
  );
  const head = 12 + json.length;
  const pad = (4 - (head % 4)) % 4;
  const prefix = Buffer.alloc(head + pad);
  prefix.write(MAGIC, 0, 'latin1');
  prefix.writeUInt32LE(json.length, 8);
  json.copy(prefix, 12);
  await writeFileAtomically(path, async (file) => {
    let pos = 0;
    for (const part of [prefix, c.weights, c.m, c.v]) {
      const bytes = new Uint8Array(part.buffer, part.byteOffset, part.byteLength);
      let done = 0;
      while (done < bytes.length)
        done += (await file.write(bytes, done, bytes.length - done, pos + done)).bytesWritten;
      pos += bytes.length;
    }
  });
}

function bad(path: string, why: string): TandemError {
  return new TandemError('TRAIN_CHECKPOINT', `${path} is not a usable training checkpoint: ${why}`, {
    hint: 'pass a file written by `tandem train` (its --checkpoint), or start without --resume',
    details: { path },
  });
}

export async function loadCheckpoint(path: string): Promise<Checkpoint> {
  const bytes = await readFile(path).catch((e: unknown) => {
    throw bad(path, `cannot read it (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  });
  if (bytes.length < 12 || bytes.toString('latin1', 0, 8) !== MAGIC) throw bad(path, 'no TNDMCKP1 header');
  const len = bytes.readUInt32LE(8);
  if (12 + len > bytes.length) throw bad(path, 'its header runs past the end of the file');
  let head: { version: number; settings: RunSettings; step: number; curve: CurvePoint[]; params: number };
  try {
    head = JSON.parse(bytes.toString('utf8', 12, 12 + len)) as typeof head;
  } catch {
    throw bad(path, 'its header is not JSON');
  }
  if (head.version !== 1) throw bad(path, `version ${head.version}, this build reads version 1`);
  const start = 12 + len + ((4 - ((12 + len) % 4)) % 4);
  const n = head.params;
  if (!Number.isInteger(n) || bytes.length !== start + 3 * n * 4)
    throw bad(path, `${bytes.length} bytes, expected ${start + 3 * n * 4} for ${n} parameters (truncated?)`);
  const all = new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + bytes.length));
  return {
    settings: head.settings,
    step: head.step,
    curve: head.curve,
    weights: all.slice(0, n),
    m: all.slice(n, 2 * n),
    v: all.slice(2 * n, 3 * n),
  };
}
