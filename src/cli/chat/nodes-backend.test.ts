import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchLocalNodes } from '../../cluster/index.js';
import { tempModel } from '../testing.js';
import { chatPiped } from './testing.js';

const path = tempModel('tandem-chat-nodes-', { arch: 'llama', shape: 'tiny', type: 'f32', seed: 5 });

test('tandem chat --nodes 2: the same greedy conversation as the model loaded in one process, each turn prefilling only what is new', async () => {
  const lines = ['Hello', 'And then?', '/reset', 'And then?'];
  const args = ['--temperature', '0', '--max-tokens', '10'];
  const split = await chatPiped(
    [path(), '--nodes', '2', '--parallel', 'pp', ...args],
    lines,
    process.env,
    120_000,
  );
  const one = await chatPiped([path(), '--threads', '1', ...args], lines);
  assert.equal(split.code, 0, split.stderr);
  assert.equal(one.code, 0, one.stderr);
  assert.match(split.stderr, /chatting with model across 2 local nodes \(--parallel pp over shm/);
  const answers = split.stdout.split('\n');
  assert.equal(answers.length, 4); // three answers and the final newline's empty rest
  // the history is sent: the same message answered with and without the first turn differs
  assert.notEqual(answers[1], answers[2]);
  assert.equal(split.stdout, one.stdout);
  // the nodes keep the conversation's K/V: the second turn prefills only what is new, as one process does
  const costs = (stderr: string): [number, number][] =>
    [...stderr.matchAll(/prompt (\d+) tokens, (\d+) prefilled/g)].map((m) => [Number(m[1]), Number(m[2])]);
  const prompts = costs(split.stderr);
  assert.equal(prompts.length, 3, split.stderr);
  const [tokens, prefilled] = prompts[1]!;
  assert.ok(prefilled < tokens, `the second turn prefilled ${prefilled} of ${tokens} tokens`);
  assert.deepEqual(prompts, costs(one.stderr));
});

test('tandem chat --hosts: the nodes of a hostfile hold the conversation, with the answers of one process', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-chat-hosts-'));
  const secret = randomBytes(24).toString('hex');
  const nodes = await launchLocalNodes(2, { secret, threads: 1, once: false });
  try {
    const hosts = join(dir, 'hosts.txt');
    writeFileSync(hosts, nodes.addresses.join('\n') + '\n');
    const secretFile = join(dir, 'cluster.secret');
    writeFileSync(secretFile, secret + '\n', { mode: 0o600 });
    const lines = ['Hello', 'And then?'];
    const args = ['--temperature', '0', '--max-tokens', '10'];
    const split = await chatPiped(
      [path(), '--hosts', hosts, '--secret-file', secretFile, ...args],
      lines,
      process.env,
      120_000,
    );
    const one = await chatPiped([path(), '--threads', '1', ...args], lines);
    assert.equal(split.code, 0, split.stderr);
    assert.match(split.stderr, /chatting with model across 2 nodes of .*hosts\.txt \(--parallel tp over tcp/);
    assert.equal(split.stdout, one.stdout);
  } finally {
    await nodes.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('tandem chat: --nodes with --url or --hosts, --parallel or --secret-file alone, and --secret are usage errors', async () => {
  for (const args of [
    [path(), '--nodes', '2', '--url', 'http://127.0.0.1:1'],
    [path(), '--nodes', '2', '--hosts', 'hosts.txt'],
    [path(), '--hosts', 'hosts.txt', '--secret', 'on-the-command-line'],
    [path(), '--secret-file', 'cluster.secret'],
    [path(), '--parallel', 'pp'],
  ]) {
    const r = await chatPiped(args, ['Hello']);
    assert.match(r.stderr, /error \[CLI_USAGE\]/, args.join(' '));
  }
});
