import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { untilOutput } from './child-output.js';

const helper = new URL('./exit-with-parent.ts', import.meta.url).href;
const tandemBin = fileURLToPath(new URL('../../bin/tandem.js', import.meta.url));

function node(code: string, options: Parameters<typeof spawn>[2]): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], options);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function gone(pid: number, withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  while (Date.now() < until) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

/** Live processes whose parent is `ppid` (Linux /proc). */
function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces, so split after its closing paren
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid) out.push(Number(d));
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

test('a tied child ends when its parent is SIGKILLed, and its own children are not tied', async () => {
  // the middle process spawns a tied grandchild, reports its pid, then waits to be killed
  const grandchild = `
    const { exitWithParent } = await import(${JSON.stringify(helper)});
    exitWithParent();
    process.stdout.write('marker=' + (process.env.TANDEM_EXIT_WITH_PARENT ?? 'none') + '\\n');
    setTimeout(() => undefined, 20000);`;
  const middle = node(
    `
    const { spawn } = await import('node:child_process');
    const { tiedToParent } = await import(${JSON.stringify(helper)});
    const c = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', ${JSON.stringify(grandchild)}],
      tiedToParent('pipe', 'inherit'));
    c.stdout.on('data', (d) => process.stdout.write(d));
    process.stdout.write('pid=' + c.pid + '\\n');
    setTimeout(() => undefined, 20000);`,
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let text = '';
  middle.stdout?.on('data', (d: Buffer) => (text += d.toString()));
  try {
    await untilOutput(middle, 'marker=', 15000, 'start the grandchild');
    const pid = Number(/pid=(\d+)/.exec(text)?.[1]);
    assert.ok(pid > 0, text);
    assert.match(text, /marker=none/, 'the marker is taken out of the tied child environment');
    assert.ok(alive(pid));
    middle.kill('SIGKILL');
    assert.ok(await gone(pid, 5000), 'the tied child outlived its killed parent');
  } finally {
    middle.kill('SIGKILL');
  }
});

test('untied, a child with stdin closed from the start runs to its end', async () => {
  const child = node(
    `
    const { exitWithParent } = await import(${JSON.stringify(helper)});
    exitWithParent();
    setTimeout(() => process.stdout.write('finished\\n'), 300);`,
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exit = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  await untilOutput(child, 'finished', 15000, 'finish');
  assert.equal(await exit, 0);
});

test('a tied child that is done exits although its parent still holds the pipe', async () => {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `const { exitWithParent } = await import(${JSON.stringify(helper)}); exitWithParent(); process.stdout.write('done\\n');`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, TANDEM_EXIT_WITH_PARENT: '1' } },
  );
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
  const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
  try {
    assert.deepEqual(await exit, { code: 0, signal: null });
  } finally {
    clearTimeout(timer);
  }
});

test('bench collectives: its rank processes end when the bench is SIGKILLed mid-run', async () => {
  // the first size's row shows that both ranks are connected and calling; the second size
  // keeps them calling for seconds after the kill
  const bench = spawn(
    process.execPath,
    [
      tandemBin,
      'bench',
      'collectives',
      '--ranks',
      '2',
      '--provider',
      'tcp',
      '--sizes',
      '8,64K',
      '--iterations',
      '100000',
      '--json',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, TANDEM_BENCH_WARMUP_MS: '0' } },
  );
  let ranks: number[] = [];
  try {
    await untilOutput(bench, '"bytes":8', 60000, 'time its first size');
    ranks = childrenOf(bench.pid as number);
    assert.equal(ranks.length, 2, 'both ranks run');
    bench.kill('SIGKILL');
    for (const pid of ranks) assert.ok(await gone(pid, 5000), `rank process ${pid} outlived the bench`);
  } finally {
    bench.kill('SIGKILL');
    for (const pid of ranks) if (alive(pid)) process.kill(pid, 'SIGKILL');
  }
});
