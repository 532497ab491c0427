import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeStaleTemporaries, writeError } from './atomic-file.js';
import { GgufFile } from './gguf-reader.js';
import { gv, writeGguf, type TensorSpec } from './gguf-writer.js';
import { untilOutput } from '../../util/child-output.js';

const F32 = 0;
const meta = new Map([['general.architecture', gv.str('llama')]]);
const tensors: TensorSpec[] = [
  { name: 'a', dims: [4], type: F32 },
  { name: 'b', dims: [4], type: F32 },
];
const write = (path: string) => writeGguf(path, meta, tensors, () => new Uint8Array(16));

function withDir(fn: (dir: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-af-'));
    try {
      await fn(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

test(
  'writeGguf writes through a temporary file and leaves no signal handlers behind',
  withDir(async (dir) => {
    const before = [process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')];
    const path = join(dir, 'm.gguf');
    await write(path);
    assert.deepEqual(readdirSync(dir), ['m.gguf']);
    assert.deepEqual(
      GgufFile.open(path).tensors.map((t) => t.name),
      ['a', 'b'],
    );
    assert.deepEqual([process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')], before);
  }),
);

test(
  'unwritable destinations fail with a typed error naming the path, and leave nothing behind',
  withDir(async (dir) => {
    mkdirSync(join(dir, 'sub'));
    const cases: [string, string, RegExp][] = [
      [join(dir, 'sub'), 'MODEL_FORMAT_IO', /sub: it exists and is a directory, not a regular file/],
      [join(dir, 'missing', 'm.gguf'), 'MODEL_FORMAT_IO', /missing\/m\.gguf: .*missing does not exist/],
      ['', 'INVALID_ARGUMENT', /the output path is empty/],
      ['/dev/full', 'MODEL_FORMAT_IO', /cannot write \/dev\/full: it exists and is a device/],
    ];
    if (existsSync('/proc/self'))
      cases.push([
        '/proc/tandem-test.gguf',
        'MODEL_FORMAT_IO',
        /cannot write \/proc\/tandem-test\.gguf: cannot create the temporary file/,
      ]);
    for (const [path, code, message] of cases) {
      await assert.rejects(write(path), (e: Error & { code?: string; hint?: string }) => {
        assert.equal(e.code, code, path);
        assert.match(e.message, message);
        assert.ok((e.hint ?? '').length > 0);
        return true;
      });
    }
    assert.deepEqual(readdirSync(dir), ['sub']);
    assert.deepEqual(readdirSync(join(dir, 'sub')), []);
  }),
);

test(
  'a write that fails part-way keeps the file that was there and removes the temporary',
  withDir(async (dir) => {
    const path = join(dir, 'm.gguf');
    writeFileSync(path, 'previous');
    const failing = writeGguf(path, meta, tensors, (_t, i) => {
      if (i === 1) throw new Error('producer failed');
      return new Uint8Array(16);
    });
    await assert.rejects(failing, /producer failed/);
    assert.equal(readFileSync(path, 'utf8'), 'previous');
    assert.deepEqual(readdirSync(dir), ['m.gguf']);
  }),
);

test('an out-of-space error is typed, names the file and says to free space', () => {
  const enospc = Object.assign(new Error('ENOSPC: no space left on device, write'), {
    code: 'ENOSPC',
    errno: -28,
    syscall: 'write',
  });
  const e = writeError('/data/m.gguf', enospc, 'cannot write it') as Error & { code?: string; hint?: string };
  assert.equal(e.code, 'MODEL_FORMAT_IO');
  assert.match(e.message, /^cannot write \/data\/m\.gguf: cannot write it: ENOSPC/);
  assert.match(e.hint ?? '', /free space/);
  const other = new Error('not a system call');
  assert.equal(writeError('/data/m.gguf', other, 'x'), other);
});

/** A child that starts writing a GGUF and stalls after its first tensor until signalled. */
function stalledWriter(path: string): { child: ReturnType<typeof spawn>; ready: Promise<void> } {
  const writer = new URL('./gguf-writer.ts', import.meta.url).href;
  const code = `
    const { writeGguf, gv } = await import(${JSON.stringify(writer)});
    await writeGguf(${JSON.stringify(path)}, new Map([['general.architecture', gv.str('llama')]]), [{ name: 'a', dims: [4], type: 0 }, { name: 'b', dims: [4], type: 0 }], async (_t, i) => {
      if (i === 1) { process.stdout.write('ready\\n'); await new Promise((r) => setTimeout(r, 20000)); }
      return new Uint8Array(16);
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = untilOutput(child, 'ready', 15000, 'start writing');
  return { child, ready };
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  test(
    `${signal} during a write removes the temporary file and still ends the process by ${signal}`,
    withDir(async (dir) => {
      const path = join(dir, 'm.gguf');
      const { child, ready } = stalledWriter(path);
      try {
        await ready;
        assert.equal(readdirSync(dir).length, 1, 'the temporary file exists while writing');
        const exited = new Promise<NodeJS.Signals | null>((resolve) =>
          child.on('exit', (_code, s) => resolve(s)),
        );
        child.kill(signal);
        assert.equal(await exited, signal);
        assert.deepEqual(readdirSync(dir), []);
      } finally {
        child.kill('SIGKILL');
      }
    }),
  );
}

test(
  "a SIGKILLed write's temporary file is removed by the next write; a live writer's is kept",
  withDir(async (dir) => {
    const path = join(dir, 'model.gguf');
    // a pid that is gone: a child that has exited
    const child = spawn(process.execPath, ['-e', '']);
    const dead = await new Promise<number>((resolve) => child.once('exit', () => resolve(child.pid!)));
    const stale = `${path}.${dead}.tmp`;
    const live = `${path}.${process.ppid}.tmp`;
    const other = join(dir, `other.gguf.${dead}.tmp`);
    for (const f of [stale, live, other]) writeFileSync(f, 'partial');
    await write(path);
    assert.ok(existsSync(path));
    assert.ok(!existsSync(stale), 'the dead writer’s partial file is gone');
    assert.ok(existsSync(live), 'a live process’s file may be a write in progress');
    assert.ok(existsSync(other), 'only the target’s temporaries are touched by its write');
    assert.deepEqual(removeStaleTemporaries(dir), [other]);
    assert.ok(existsSync(live));
  }),
);
