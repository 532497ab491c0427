// The model on one machine only: nodes that look for it under an empty directory (or find
// another model at its path) receive their slices from the coordinator, verified and cached.
// Real node processes on 127.0.0.1; the coordinator runs in this process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { tandemBin } from '../../src/cli/testing.js';
import { ClusterSession, launchLocalNodes, type LocalNodes } from '../../src/cluster/index.js';
import type { ShardOrigin } from '../../src/cluster/slices/model-source.js';
import { makeModel } from '../../src/engine/format/make-model.js';
import { GgufModelFile } from '../../src/engine/model/gguf-model-file.js';
import { makeTestModelFile, PROMPT, STEPS, singleNodeTokens } from './parallel-models.js';

const secret = 'slices-e2e-secret-0123456789';
const dir = mkdtempSync(join(tmpdir(), 'tandem-slices-'));
const root = join(dir, 'node-root');
const cache = join(dir, 'cache');
let model: string;
let expected: number[];
let nodes: LocalNodes;

before(async () => {
  mkdirSync(root);
  // the nodes inherit it: their slice cache lives here, not in the user's
  process.env.TANDEM_CACHE_DIR = cache;
  model = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
  [expected, nodes] = await Promise.all([
    singleNodeTokens(model),
    launchLocalNodes(2, { secret, threads: 1, once: false, modelRoot: root }),
  ]);
});

after(async () => {
  await nodes?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function runOnNodes(): Promise<{ tokens: number[]; origins: ShardOrigin[]; sent: number }> {
  const session = await ClusterSession.connect(
    nodes.addresses.map((address) => ({ address })),
    secret,
  );
  try {
    await session.load({
      model,
      parallel: 'tp',
      provider: 'tcp',
      greedy: true,
      contextLength: 128,
      commTimeoutMs: 20_000,
    });
    const result = await session.generate({ prompt: [...PROMPT], maxTokens: STEPS });
    await session.unload();
    return { tokens: result.tokens, origins: session.origins, sent: session.slicesSent };
  } finally {
    session.close();
  }
}

function slices(o: ShardOrigin): Extract<ShardOrigin, { kind: 'slices' }> {
  assert.equal(o.kind, 'slices', 'the node received its slices');
  return o as Extract<ShardOrigin, { kind: 'slices' }>;
}

describe('slices over the wire', () => {
  let firstFetched: number[] = [];

  it('a node without the file receives only its slices and gives the local tokens', async () => {
    const r = await runOnNodes();
    assert.deepEqual(r.tokens, expected);
    firstFetched = r.origins.map((o) => slices(o).fetchedBytes);
    for (const f of firstFetched) assert.ok(f > 0, 'each rank fetched bytes');
    const fileBytes = readFileSync(model).length;
    for (const f of firstFetched)
      assert.ok(f < fileBytes, `a rank fetched ${f} of the file's ${fileBytes} bytes`);
    assert.equal(
      r.sent,
      firstFetched.reduce((a, b) => a + b, 0),
      'the coordinator sent what the ranks received',
    );
  });

  it('a second placement loads from the cache: no bytes transferred', async () => {
    const r = await runOnNodes();
    assert.deepEqual(r.tokens, expected);
    assert.equal(r.sent, 0);
    for (const o of r.origins) {
      assert.equal(slices(o).fetchedBytes, 0);
      assert.ok(slices(o).cachedBytes > 0);
    }
  });

  it('a corrupted cache entry is detected and fetched again', async () => {
    const dirOfSlices = join(cache, 'slices');
    const entries = readdirSync(dirOfSlices).filter((n) => n.endsWith('.slice'));
    const victim = join(dirOfSlices, entries.sort()[0] as string);
    const bytes = readFileSync(victim);
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 1) ^ 0xff, bytes.length - 1);
    writeFileSync(victim, bytes);
    const r = await runOnNodes();
    assert.deepEqual(r.tokens, expected);
    const fetched = r.origins.map((o) => slices(o).fetchedBytes);
    const total = fetched.reduce((a, b) => a + b, 0);
    assert.ok(total > 0, 'the damaged slice was fetched again');
    assert.ok(total < firstFetched.reduce((a, b) => a + b, 0), 'only the damaged slice was fetched');
    assert.equal(r.sent, total);
  });

  it('a node with another model at the same path gets slices, not wrong weights', async () => {
    const other = join(root, model);
    mkdirSync(dirname(other), { recursive: true });
    // same shape and header, other weights: only the content hash tells them apart
    await makeModel(other, {
      arch: 'llama',
      shape: {
        layers: 4,
        embd: 128,
        ff: 256,
        heads: 4,
        kvHeads: 2,
        headDim: 32,
        vocab: 512,
        context: 128,
        experts: 4,
        expertsUsed: 2,
        expertFf: 128,
        sharedFf: 128,
      },
      type: 'q8_0',
      std: 0.3,
      seed: 6,
    });
    assert.notDeepEqual(await singleNodeTokens(other), expected, 'the other model decodes otherwise');
    const r = await runOnNodes();
    assert.deepEqual(r.tokens, expected);
    for (const o of r.origins) assert.match(slices(o).why, /another model/);
  });

  it('a copy with one byte of its weights changed (same size and header) gets slices too', async () => {
    const other = join(root, model);
    const bytes = readFileSync(model);
    const file = GgufModelFile.open(model);
    const dataOffset = file.gguf.dataOffset;
    file.close();
    const at = dataOffset + Math.floor((bytes.length - dataOffset) / 2);
    bytes.writeUInt8(bytes.readUInt8(at) ^ 0x01, at);
    writeFileSync(other, bytes);
    const r = await runOnNodes();
    assert.deepEqual(r.tokens, expected);
    for (const o of r.origins) assert.match(slices(o).why, /other weights/);
  });
});

/** `tandem ARGS` in a child process (bounded), with `env` added. */
function tandem(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [tandemBin, ...args], {
      cwd: dir,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

it(
  "tandem run --nodes: nodes without the file get slices; the coordinator says so; the tokens are the local run's",
  { timeout: 180_000 },
  async () => {
    const emptyRoot = join(dir, 'cli-root');
    mkdirSync(emptyRoot, { recursive: true });
    // without --json: the progress lines go to stderr, the text to stdout
    const args = [
      'run',
      model,
      '--prompt-tokens',
      PROMPT.join(','),
      '--max-tokens',
      String(STEPS),
      '--temperature',
      '0',
    ];
    const local = await tandem(args, {});
    assert.equal(local.code, 0, local.stderr);
    const env = { TANDEM_MODEL_ROOT: emptyRoot, TANDEM_CACHE_DIR: join(dir, 'cli-cache') };
    const split = await tandem([...args, '--nodes', '2'], env);
    assert.equal(split.code, 0, split.stderr);
    assert.ok(local.stdout.length > 0);
    assert.equal(split.stdout, local.stdout);
    assert.match(split.stderr, /slices: rank 1 received [\d.]+ MB .* cannot be opened here/);
  },
);
