import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { mac, parseHostPort } from './protocol.js';
import { PROTOCOL_VERSION } from './control-messages.js';
import { startNode } from './node-agent.js';
import { ClusterSession } from './session.js';

/*
 * The node's control port under hostile input: random bytes, truncated and oversized frames,
 * non-object JSON, requests before authentication, a wrong secret, a replayed handshake. Each
 * is refused (the connection closed), the node keeps running, and a real coordinator is then
 * served at once (nothing held a place or changed state).
 */

const secret = 'fuzz-secret-0123456789abcdef';
let node: Awaited<ReturnType<typeof startNode>>;
const logs: string[] = [];

before(async () => {
  node = await startNode({
    listen: '127.0.0.1:0',
    secret,
    probe: false,
    threads: 1,
    log: (l) => logs.push(l),
  });
});
after(() => node.close());

/** Polls `check` every 20 ms until it holds; throws, naming `what`, after `ms`. */
async function until(check: () => boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`${what} did not happen within ${ms} ms`);
    await sleep(20);
  }
}

/** Opens a connection, resolves with the first line it gets (the challenge). */
async function open(): Promise<{ socket: Socket; challenge: { nonce: string } }> {
  const { host, port } = parseHostPort(node.address, 'node');
  const socket = connect({ host, port });
  const line = await new Promise<string>((resolve, reject) => {
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString();
      const nl = text.indexOf('\n');
      if (nl >= 0) resolve(text.slice(0, nl));
    });
    socket.once('error', reject);
  });
  return { socket, challenge: JSON.parse(line) as { nonce: string } };
}

/** Resolves true once the node has closed the connection, false after `ms`. */
function closedWithin(socket: Socket, ms: number): Promise<boolean> {
  if (socket.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
    socket.on('error', () => undefined);
  });
}

async function coordinatorServed(): Promise<void> {
  const session = await ClusterSession.connect([{ address: node.address }], secret, 3000);
  try {
    const [info] = session.infos;
    assert.equal(info?.pid, process.pid, 'hello answered by the node');
  } finally {
    session.close();
    await sleep(50);
  }
}

test('random bytes, non-object JSON, requests before authentication and oversized frames are refused', async () => {
  const attacks: (Buffer | string)[] = [
    randomBytes(4096),
    '[1,2,3]\n',
    '"auth"\n',
    '{"id":1,"type":"load","model":"/etc/passwd"}\n',
    '{"type":"auth","mac":"00","nonce":"x"}\n',
    Buffer.alloc(17 * 1024 * 1024, 0x61), // one line past the 16 MiB limit
  ];
  for (const attack of attacks) {
    const { socket } = await open();
    socket.write(attack);
    assert.ok(await closedWithin(socket, 5000), `refused: ${String(attack).slice(0, 40)}`);
  }
  await coordinatorServed();
});

test('a truncated frame holds no place: a coordinator is served while it hangs', async () => {
  const { socket } = await open();
  socket.write('{"type":"auth","mac":"');
  await coordinatorServed();
  socket.destroy();
});

test('a wrong secret and a replayed handshake are refused', async () => {
  const wrong = await open();
  wrong.socket.write(
    JSON.stringify({
      type: 'auth',
      mac: mac('not-the-secret-000000', 'coordinator', wrong.challenge.nonce),
      nonce: 'n',
    }) + '\n',
  );
  assert.ok(await closedWithin(wrong.socket, 5000), 'wrong secret refused');
  // an answer recorded for one challenge does not open another connection
  const first = await open();
  const recorded = { type: 'auth', mac: mac(secret, 'coordinator', first.challenge.nonce), nonce: 'n1' };
  first.socket.destroy();
  const replay = await open();
  assert.notEqual(replay.challenge.nonce, first.challenge.nonce, 'every connection gets a fresh challenge');
  replay.socket.write(JSON.stringify(recorded) + '\n');
  assert.ok(await closedWithin(replay.socket, 5000), 'replayed handshake refused');
  assert.ok(logs.some((l) => /failed authentication/.test(l)));
  await coordinatorServed();
});

test('a coordinator of another protocol version is refused, and says so in the log', async () => {
  const { socket, challenge } = await open();
  assert.equal(
    (challenge as { version?: number }).version,
    PROTOCOL_VERSION,
    'the challenge names the version',
  );
  socket.write(
    JSON.stringify({
      type: 'auth',
      mac: mac(secret, 'coordinator', challenge.nonce),
      nonce: 'n',
      version: 1,
    }) + '\n',
  );
  assert.ok(await closedWithin(socket, 5000), 'another version refused');
  assert.ok(logs.some((l) => /control protocol 1/.test(l)));
  await coordinatorServed();
});

test('after authentication, a malformed request closes the connection unanswered; the next coordinator is served', async () => {
  for (const bad of [
    { type: 'load', id: 1, model: '/m.gguf' }, // no plan
    { type: 'forward', id: 2, seqs: ['a'], tokens: [1] },
    { type: 'generate', id: 3, prompt: [], maxTokens: 4 },
    { type: 'no-such-request', id: 4 },
    { type: 'hello' }, // no id
    {
      type: 'forward-mixed',
      id: 5,
      prefill: { seq: 1, tokens: [1] },
      decode: { seqs: [2], tokens: ['x'] },
      onePass: true,
    },
    { type: 'forward-mixed', id: 6, prefill: { seq: 1, tokens: [1] }, decode: { seqs: [2], tokens: [3] } }, // no onePass
    { type: 'forward-mixed', id: 7, prefill: [1, 2], decode: { seqs: [2], tokens: [3] }, onePass: false },
  ]) {
    const { socket, challenge } = await open();
    const replies: string[] = [];
    socket.on('data', (d: Buffer) => replies.push(d.toString()));
    socket.write(
      JSON.stringify({
        type: 'auth',
        mac: mac(secret, 'coordinator', challenge.nonce),
        nonce: 'n2',
        version: PROTOCOL_VERSION,
      }) + '\n',
    );
    await until(() => replies.join('').includes('"welcome"'), 'welcomed', 5000);
    socket.write(JSON.stringify(bad) + '\n');
    assert.ok(await closedWithin(socket, 5000), `closed on ${JSON.stringify(bad)}`);
    assert.ok(!replies.join('').includes('"ok"'), 'no answer to it');
    assert.ok(logs.some((l) => /a malformed message/.test(l)));
  }
  await coordinatorServed();
});
