import { randomBytes } from 'node:crypto';
import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { TandemError } from '../errors/index.js';
import { removeStaleTemporaries } from '../engine/format/atomic-file.js';
import { makeModel } from '../engine/format/make-model.js';
import type { ModelShape } from '../engine/format/model-plan.js';
import { readTokenizer } from '../engine/model/gguf-model-file.js';
import type { ProviderName } from '../fabric/index.js';
import { launchLocalNodes } from './launcher.js';
import { resolveModelPath } from './model-path.js';
import { ClusterSession, type ClusterResult } from './session.js';

/**
 * The demo model: SmolLM2-135M's shape (Llama architecture, 30 layers of width 576, 9 query
 * and 3 KV heads, tied embeddings, 49152-token vocabulary) in F32, with RANDOM weights.
 * Weights drawn with std 0.1 make the tokens move step to step (at 0.02 a random model
 * repeats one token). F32 rather than Q8_0 or F16: those kernels round activations to int8
 * blocks or halves, which turns a last-bit difference of a tensor-parallel sum into a whole
 * rounding step, and a random model (unlike a trained one) amplifies it until a near-tie
 * between two tokens flips. Splits add their sums in one node's order only where the
 * projections divide into leaves (docs/parallel.md, "Exact tensor parallel"), and this
 * shape's 9 heads do not: its attn_output sums differ in the last bits, which Q8_0 and F16 turn
 * into diverging tokens and F32 does not (docs/parallel.md, "Exact tensor parallel").
 */
/**
 * Untimed tokens before each timed generation, from the same prompt: V8 compiles the prefill
 * and decode paths (and the tensor-parallel exchange) over the first tokens, and the second
 * node starts cold. With fewer, the 2-node run's timed tokens still pay for that compiling and
 * it measures slower than one node although, warm, it is faster (docs/parallel.md,
 * "Measured", has the figures).
 */
const WARMUP_TOKENS = 64;

export const demoShape: ModelShape = {
  layers: 30,
  embd: 576,
  ff: 1536,
  heads: 9,
  kvHeads: 3,
  headDim: 64,
  vocab: 49152,
  context: 2048,
  experts: 0,
  expertsUsed: 0,
  expertFf: 0,
  sharedFf: 0,
};
export const demoShapeName = 'SmolLM2-135M';

export function cacheDir(): string {
  return (
    process.env.TANDEM_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'tandem')
  );
}

function cacheDirError(dir: string, problem: string, cause?: unknown): TandemError {
  return new TandemError('INVALID_ARGUMENT', `cannot use the cache directory ${dir}: ${problem}`, {
    hint: 'set TANDEM_CACHE_DIR (or XDG_CACHE_HOME) to a writable directory, for example TANDEM_CACHE_DIR=/tmp/tandem-cache',
    details: { dir },
    ...(cause === undefined ? {} : { cause }),
  });
}

/**
 * Creates `dir` and its missing parents one at a time. Checked first: the nearest existing
 * ancestor must be a writable directory. Not `mkdirSync(dir, { recursive: true })`: a regular
 * file in the way gives a bare EEXIST, and under /proc (where mkdir fails with ENOENT even
 * though the parent exists) Node's recursive mkdir loops forever.
 */
export function ensureCacheDir(dir: string): void {
  const missing: string[] = [];
  let at = resolve(dir);
  for (;;) {
    let stats;
    try {
      stats = statSync(at);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR')
        throw cacheDirError(dir, `${at}: ${(e as Error).message}`, e);
      missing.unshift(at);
      at = dirname(at);
      continue;
    }
    if (!stats.isDirectory()) throw cacheDirError(dir, `${at} exists and is not a directory`);
    break;
  }
  if (missing.length === 0) return;
  try {
    accessSync(at, constants.W_OK);
  } catch (e) {
    throw cacheDirError(dir, `${at} is not writable`, e);
  }
  for (const d of missing) {
    try {
      mkdirSync(d);
    } catch (e) {
      throw cacheDirError(dir, `cannot create ${d}: ${(e as Error).message}`, e);
    }
  }
}

/** Makes the demo model once (cached); returns its path. */
export async function demoModel(
  onProgress: (line: string) => void,
): Promise<{ path: string; made: boolean }> {
  const dir = cacheDir();
  const path = join(dir, 'demo-smollm2-135m-shape-f32-random-std0.1-seed1.gguf');
  ensureCacheDir(dir);
  // A demo or make-model killed with SIGKILL left its partial file here; its pid is gone.
  for (const stale of removeStaleTemporaries(dir)) onProgress(`removed ${stale}, left by a killed write`);
  if (existsSync(path)) return { path, made: false };
  let last = 0;
  // makeModel writes through a temporary file that it removes on error and on SIGINT/SIGTERM,
  // so `path` exists only once complete.
  await makeModel(path, {
    arch: 'llama',
    shape: demoShape,
    type: 'f32',
    tied: true,
    seed: 1,
    std: 0.1,
    onProgress: (written, total) => {
      const now = Date.now();
      if (now - last < 1000 && written < total) return;
      last = now;
      onProgress(
        `making the demo model: ${Math.round((100 * written) / total)}% of ${(total / 1048576).toFixed(0)} MiB`,
      );
    },
  });
  return { path, made: true };
}

export interface DemoRun {
  nodes: number;
  tokens: number[];
  text: string;
  /** Best of the timed rounds: lowest TTFT, highest decode tokens/s. */
  ttftMs: number;
  decodeTokS: number;
  plan: string[];
  result: ClusterResult;
}

export interface DemoOptions {
  prompt: string;
  maxTokens: number;
  provider: ProviderName;
  /** How the two-node run splits the model (default tp). */
  parallel?: 'tp' | 'pp';
  threads: number;
  /** Timed rounds of each configuration, alternated (default 3); the best of each counts. */
  repeat?: number;
  onProgress: (line: string) => void;
}

/** Untimed tokens before the timed rounds (see WARMUP_TOKENS), for the printed method line. */
export const demoWarmupTokens = WARMUP_TOKENS;

/** The better of two timed runs of one configuration: lowest TTFT, highest decode tokens/s. */
function bestOf(a: ClusterResult | undefined, r: ClusterResult): ClusterResult {
  if (a === undefined) return r;
  return {
    ...a,
    ttftMs: Math.min(a.ttftMs, r.ttftMs),
    decodeTokS: Math.max(a.decodeTokS, r.decodeTokS),
    prefillTokS: Math.max(a.prefillTokS, r.prefillTokS),
  };
}

/**
 * Runs the prompt on one node and across two (tensor or pipeline parallel), each node one
 * local process, measured as `tandem bench cluster` measures: the single-node reference runs
 * in a third process loaded side by side with the split, both are warmed up, then the timed
 * generations alternate for `repeat` rounds and the best of each counts. Run one after the
 * other, a cold second node or a drift of the machine's speed went straight into the ratio.
 */
export async function runDemo(given: string, o: DemoOptions): Promise<{ prompt: number[]; runs: DemoRun[] }> {
  const path = resolveModelPath(given);
  const tokenizer = readTokenizer(path);
  if (tokenizer === undefined) {
    throw new TandemError('MODEL_FORMAT_UNSUPPORTED', `${path} has no tokenizer (tokenizer.ggml.tokens)`, {
      hint: 'the demo prints text: use a GGUF file with tokenizer metadata',
    });
  }
  const prompt = tokenizer.encode(o.prompt);
  const repeat = Math.max(1, o.repeat ?? 3);
  const secret = randomBytes(16).toString('hex');
  o.onProgress(`starting 2 local nodes and a single-node reference (${o.threads} thread(s) each)`);
  const local = await launchLocalNodes(3, { secret, threads: o.threads, once: false });
  const sessions: ClusterSession[] = [];
  try {
    const parallel = o.parallel ?? 'tp';
    const open = async (n: number): Promise<ClusterSession> => {
      const addresses = n === 1 ? local.addresses.slice(2) : local.addresses.slice(0, n);
      const session = await ClusterSession.connect(
        addresses.map((address) => ({ address })),
        secret,
      );
      sessions.push(session);
      o.onProgress(
        `loading on ${n} node(s)${n > 1 ? `, ${parallel === 'tp' ? 'tensor' : 'pipeline'} parallel over ${o.provider}` : ''}`,
      );
      await session.load({
        model: path,
        parallel: n > 1 ? parallel : 'tp',
        provider: o.provider,
        greedy: true,
        contextLength: prompt.length + Math.max(o.maxTokens, WARMUP_TOKENS) + 8,
      });
      o.onProgress(`warming up ${n} node(s): ${WARMUP_TOKENS} untimed tokens`);
      await session.generate({ prompt, maxTokens: WARMUP_TOKENS });
      return session;
    };
    const configs = [await open(1), await open(2)];
    const first: (ClusterResult | undefined)[] = [undefined, undefined];
    const best: (ClusterResult | undefined)[] = [undefined, undefined];
    for (let i = 0; i < repeat; i++) {
      o.onProgress(`round ${i + 1} of ${repeat}: ${o.maxTokens} tokens on 1 node, then on 2`);
      for (const c of [0, 1]) {
        const r = await (configs[c] as ClusterSession).generate({ prompt, maxTokens: o.maxTokens });
        first[c] ??= r;
        best[c] = bestOf(best[c], r);
      }
    }
    const runs = [0, 1].map((c): DemoRun => {
      const b = best[c] as ClusterResult;
      const tokens = (first[c] as ClusterResult).tokens;
      return {
        nodes: c + 1,
        tokens,
        text: tokenizer.decode(tokens),
        ttftMs: b.ttftMs,
        decodeTokS: b.decodeTokS,
        plan: (configs[c] as ClusterSession).planLines(),
        result: b,
      };
    });
    return { prompt, runs };
  } catch (e) {
    throw await local.explain(e);
  } finally {
    for (const s of sessions) s.close();
    await local.stop();
  }
}
