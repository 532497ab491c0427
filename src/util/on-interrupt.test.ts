import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { untilOutput } from './child-output.js';

const helper = new URL('./on-interrupt.ts', import.meta.url).href;

/**
 * A child process that sets up `setup` (which may call onInterrupt and append to the file
 * `log`), prints `ready` and waits up to 20 s; the parent then sends it `signal`. Resolves with
 * how it ended and what it appended to the log. Every wait is bounded.
 */
async function interrupt(
  setup: string,
  signal: NodeJS.Signals,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; log: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-interrupt-'));
  const log = join(dir, 'log');
  const code = `
    const { appendFileSync } = await import('node:fs');
    const { onInterrupt } = await import(${JSON.stringify(helper)});
    const note = (s) => appendFileSync(${JSON.stringify(log)}, s + '\\n');
    ${setup}
    process.stdout.write('ready\\n');
    setTimeout(() => note('timed out'), 20000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (c, s) => resolve({ code: c, signal: s })),
    );
    await untilOutput(child, 'ready', 15000, 'get ready');
    child.kill(signal);
    const end = await Promise.race([
      ended,
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('the child did not end within 25 s')), 25000).unref(),
      ),
    ]);
    return { ...end, log: existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : [] };
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  test(`onInterrupt runs the cleanup on ${signal}, then the process still ends by ${signal}`, async () => {
    const r = await interrupt(
      `onInterrupt((s) => note('cleanup ' + s + ' ' + process.listenerCount(s)));`,
      signal,
    );
    // the cleanup runs before its own listener is removed (one left while it runs)
    assert.deepEqual(r, { code: null, signal, log: [`cleanup ${signal} 1`] });
  });
}

test('every registered cleanup runs before the signal ends the process', async () => {
  const r = await interrupt(
    `onInterrupt(() => note('first')); onInterrupt(() => note('second'));`,
    'SIGTERM',
  );
  assert.deepEqual(r, { code: null, signal: 'SIGTERM', log: ['first', 'second'] });
});

test('another listener keeps the process alive; the cleanup still runs once and unregisters', async () => {
  const r = await interrupt(
    `onInterrupt((s) => note('cleanup ' + s));
     process.on('SIGINT', () => { note('handled, listeners ' + process.listenerCount('SIGINT') + ' ' + process.listenerCount('SIGTERM')); setTimeout(() => process.exit(7), 50); });`,
    'SIGINT',
  );
  assert.deepEqual(r, { code: 7, signal: null, log: ['cleanup SIGINT', 'handled, listeners 1 0'] });
});

test('after unregistering, no cleanup runs and no listener is left', async () => {
  const r = await interrupt(
    `const before = process.listenerCount('SIGINT') + process.listenerCount('SIGTERM');
     const off = onInterrupt(() => note('cleanup'));
     off(); off();
     note('listeners ' + before + ' ' + (process.listenerCount('SIGINT') + process.listenerCount('SIGTERM')));`,
    'SIGTERM',
  );
  assert.deepEqual(r, { code: null, signal: 'SIGTERM', log: ['listeners 0 0'] });
});
