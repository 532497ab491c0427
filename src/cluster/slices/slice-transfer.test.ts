import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { makeModel } from '../../engine/format/make-model.js';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import { matrixShape } from '../../engine/model/model-file.js';
import { mac } from '../protocol.js';
import { openShardFile } from './model-source.js';
import { SliceCache } from './slice-cache.js';
import { SliceClient } from './slice-client.js';
import { SliceServer } from './slice-server.js';
import { FrameKind, readFrames, writeFrame } from './wire.js';

const secret = 'slice-transfer-test-secret';
const dir = mkdtempSync(join(tmpdir(), 'tandem-slice-transfer-'));
const model = join(dir, 'model.gguf');
let server: SliceServer;

before(async () => {
  process.env.TANDEM_CACHE_DIR = join(dir, 'cache');
  await makeModel(model, {
    arch: 'llama',
    // the embedding (4096 x 256 f32, 4 MiB) spans two pieces
    shape: {
      layers: 1,
      embd: 256,
      ff: 512,
      heads: 4,
      kvHeads: 2,
      headDim: 64,
      vocab: 4096,
      context: 64,
      experts: 0,
      expertsUsed: 0,
      expertFf: 0,
      sharedFf: 0,
    },
    type: 'f32',
    seed: 3,
  });
  server = await SliceServer.start({ model, mac: (role, n) => mac(secret, role, n) });
});

after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A relay between a member and the slice server that flips one byte of the first large piece
 * of tensor data it carries: damage on the way, as a bad cable or NIC would do it.
 */
async function damagingRelay(to: string): Promise<{ address: string; relay: Server; damaged: () => number }> {
  let damaged = 0;
  const [host, port] = [to.slice(0, to.lastIndexOf(':')), Number(to.slice(to.lastIndexOf(':') + 1))];
  const relay = createServer((member) => {
    const upstream = connect({ host, port });
    member.pipe(upstream);
    readFrames(
      upstream,
      (f) => {
        if (f.kind === FrameKind.chunk && f.payload.length > 1024 * 1024 && damaged === 0) {
          damaged++;
          f.payload.writeUInt8(f.payload.readUInt8(f.payload.length - 1) ^ 0x10, f.payload.length - 1);
        }
        void writeFrame(member, f.kind as FrameKind, [f.payload]);
      },
      () => member.destroy(),
    );
    member.on('error', () => upstream.destroy());
    upstream.on('error', () => member.destroy());
    member.on('close', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(relay.address() as { port: number }).port}`,
    relay,
    damaged: () => damaged,
  };
}

describe('slice transfer', () => {
  it('refuses a member without the cluster secret', async () => {
    const source = server.addressFor('127.0.0.1');
    await assert.rejects(
      SliceClient.connect(source.address, 'another-secret-of-16-bytes', 0, 5000),
      (e: unknown) => isTandemError(e, 'CLUSTER_AUTH'),
    );
  });

  it('a damaged piece is a typed error naming the tensor, asked for again, never used', async () => {
    const { address, relay, damaged } = await damagingRelay(server.addressFor('127.0.0.1').address);
    try {
      const client = await SliceClient.connect(address, secret, 0);
      const into = new Uint8Array(4096 * 256 * 4);
      await assert.rejects(client.rows('token_embd.weight', 0, 4096, into), (e: unknown) => {
        assert.ok(isTandemError(e, 'CLUSTER_SLICE_CORRUPT'));
        assert.match((e as Error).message, /token_embd\.weight/);
        return true;
      });
      // the connection stays usable: the same request again gets the right bytes
      await client.rows('token_embd.weight', 0, 4096, into);
      client.close();
      const local = GgufModelFile.open(model);
      assert.deepEqual(Buffer.from(into), Buffer.from(local.readRows('token_embd.weight', 0, 4096)));
      local.close();
      assert.equal(damaged(), 1);

      // through a member's model file: retried by itself, and the bytes are the coordinator's
      const root = join(dir, 'empty-root');
      mkdirSync(root, { recursive: true });
      const relayed = await damagingRelay(server.addressFor('127.0.0.1').address);
      const shard = await openShardFile(
        model,
        { ...server.addressFor('127.0.0.1'), address: relayed.address },
        { secret, rank: 0, modelRoot: root },
      );
      const rows = await shard.file.readRows('token_embd.weight', 100, 3000);
      const origin = shard.origin();
      shard.file.close();
      relayed.relay.close();
      assert.equal(origin.kind, 'slices');
      assert.equal(origin.kind === 'slices' ? origin.refetches : -1, 1);
      const check = GgufModelFile.open(model);
      assert.deepEqual(Buffer.from(rows), Buffer.from(check.readRows('token_embd.weight', 100, 3000)));
      check.close();
    } finally {
      relay.close();
    }
  });

  it('requests sent together are answered in order, each into its own place; a damaged one fails alone', async () => {
    const { address, relay, damaged } = await damagingRelay(server.addressFor('127.0.0.1').address);
    const local = GgufModelFile.open(model);
    try {
      const client = await SliceClient.connect(address, secret, 0);
      // once the manifest is known the coordinator sends whole pieces from its mapped file
      await client.manifest();
      // the embedding first: its first piece is the one the relay damages
      const names = [
        'token_embd.weight',
        ...[...local.tensors.keys()].filter((n) => n !== 'token_embd.weight'),
      ];
      const asks = names.map((name) => {
        const rows = matrixShape(local.tensors.get(name)!).rows;
        const want = local.readRows(name, 0, rows);
        return { name, rows, want: Buffer.from(want), into: new Uint8Array(want.length) };
      });
      const settled = await Promise.allSettled(asks.map((a) => client.rows(a.name, 0, a.rows, a.into)));
      assert.equal(damaged(), 1);
      const first = settled[0]!;
      assert.ok(first.status === 'rejected' && isTandemError(first.reason, 'CLUSTER_SLICE_CORRUPT'));
      assert.match((first.reason as Error).message, /token_embd\.weight/);
      settled.slice(1).forEach((r, i) => {
        assert.equal(r.status, 'fulfilled', names[i + 1]);
        assert.deepEqual(Buffer.from(asks[i + 1]!.into), asks[i + 1]!.want, names[i + 1]);
      });
      // asked again on the same connection: the coordinator's bytes
      await client.rows(asks[0]!.name, 0, asks[0]!.rows, asks[0]!.into);
      assert.deepEqual(Buffer.from(asks[0]!.into), asks[0]!.want);
      client.close();
    } finally {
      local.close();
      relay.close();
    }
  });

  it('a member holding the same file (same stat, or a copy with the same content) loads its own', async () => {
    const before = server.sentBytes;
    const same = await openShardFile(model, server.addressFor('127.0.0.1'), { secret, rank: 0 });
    assert.equal(same.origin().kind, 'local');
    same.file.close();
    const root = join(dir, 'copy-root');
    mkdirSync(dirname(join(root, model)), { recursive: true });
    copyFileSync(model, join(root, model));
    const copy = await openShardFile(model, server.addressFor('127.0.0.1'), {
      secret,
      rank: 0,
      modelRoot: root,
    });
    assert.equal(copy.origin().kind, 'local');
    copy.file.close();
    assert.equal(server.sentBytes, before, 'no tensor bytes were sent');
  });

  it('the cache removes the temporary files a killed member left', () => {
    const cacheDir = join(dir, 'stale-cache');
    mkdirSync(cacheDir, { recursive: true });
    // a pid above any pid_max: its writer is gone
    const stale = join(cacheDir, 'abc-0-1.slice.4999999999.tmp');
    writeFileSync(stale, 'partial');
    new SliceCache(cacheDir);
    assert.equal(existsSync(stale), false);
  });
});
