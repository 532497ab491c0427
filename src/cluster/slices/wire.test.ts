import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { frameAssembler, frameHeader, FrameKind, type Frame } from './wire.js';

/** Frames as bytes: header then payload, concatenated. */
function bytes(frames: readonly { kind: FrameKind; payload: Uint8Array }[]): Uint8Array {
  return Buffer.concat(frames.flatMap((f) => [frameHeader(f.kind, f.payload.length), f.payload]));
}

/** Feeds `all` in reads of the given sizes (cycled). */
function feedIn(feed: (d: Uint8Array) => void, all: Uint8Array, sizes: readonly number[]): void {
  for (let at = 0, i = 0; at < all.length; i++) {
    const n = sizes[i % sizes.length]!;
    feed(all.subarray(at, at + n));
    at += n;
  }
}

describe('slice frames', () => {
  const head = Buffer.alloc(32, 0xab);
  const data = Buffer.from(Array.from({ length: 1000 }, (_, i) => i & 0xff));
  const stream = bytes([
    { kind: FrameKind.json, payload: Buffer.from('{"a":1}') },
    { kind: FrameKind.chunk, payload: Buffer.concat([head, data]) },
    { kind: FrameKind.end, payload: Buffer.alloc(0) },
  ]);

  for (const sizes of [[1], [3, 7, 64], [5], [stream.length]])
    it(`a placed chunk lands in its destination whatever the reads' sizes (${sizes.join(',')})`, () => {
      const into = new Uint8Array(1500);
      const frames: Frame[] = [];
      const feed = frameAssembler(
        (f) => frames.push(f),
        (why) => assert.fail(why),
        (kind, length) =>
          kind === FrameKind.chunk
            ? { head: Buffer.alloc(32), body: into.subarray(100, 100 + length - 32) }
            : undefined,
      );
      feedIn(feed, stream, sizes);
      assert.deepEqual(
        frames.map((f) => f.kind),
        [FrameKind.json, FrameKind.chunk, FrameKind.end],
      );
      assert.equal(frames[0]!.payload.toString(), '{"a":1}');
      assert.equal(frames[0]!.body, undefined);
      assert.deepEqual(frames[1]!.payload, head);
      assert.equal(frames[1]!.body!.buffer, into.buffer, 'the body is the destination itself');
      assert.deepEqual(Buffer.from(into.subarray(100, 1100)), data);
      assert.equal(into[99], 0);
      assert.equal(into[1100], 0, 'nothing written past the piece');
      assert.equal(frames[2]!.payload.length, 0);
    });

  it('an oversized frame ends the stream', () => {
    const why: string[] = [];
    const feed = frameAssembler(
      () => assert.fail('no frame expected'),
      (w) => why.push(w),
    );
    const h = Buffer.alloc(5);
    h.writeUInt8(FrameKind.chunk, 0);
    h.writeUInt32BE(0xffffffff, 1);
    feed(h);
    assert.match(why[0]!, /exceeds/);
  });
});
