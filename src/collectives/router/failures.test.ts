import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TandemError } from '../../errors/index.js';
import { MessageKind } from '../header.js';
import { abortNotice, linkFailedError, NO_RANK, readAbortNotice } from './failures.js';
import { controlHeader } from './link.js';

/** `error` as the abort notice that rank `src` sends to rank `dst`, read there. */
function passOn(error: TandemError, src: number, dst: number): TandemError {
  const { lost, body } = abortNotice(error);
  const h = controlHeader(MessageKind.abort, src, dst);
  h.aux = lost;
  return readAbortNotice(h, body, src);
}

test('a loss passed on from rank to rank still names the pair whose link broke', () => {
  // the link between ranks 0 and 2 breaks; rank 0 sees it, its notice reaches 2 through 1
  const atOne = passOn(linkFailedError(0, 2, 'peer_lost', new Error('timeout')), 0, 1);
  assert.equal(atOne.code, 'COLL_PEER_LOST');
  assert.deepEqual([atOne.details.rank, atOne.details.reportedBy], [2, 0]);
  const atTwo = passOn(atOne, 1, 2);
  assert.equal(atTwo.code, 'COLL_PEER_LOST');
  // not [2, 1]: rank 1's link to rank 2 works
  assert.deepEqual([atTwo.details.rank, atTwo.details.reportedBy], [2, 0], atTwo.message);
  assert.match(atTwo.message, /rank 2 was lost \(reported by rank 0 via rank 1\)/);
});

test('a notice that names no lost rank is an abort by its sender; a long message still parses', () => {
  const timeout = new TandemError('COLL_TIMEOUT', 'x'.repeat(20_000), { hint: 'h' });
  const { lost, body } = abortNotice(timeout);
  assert.equal(lost, NO_RANK);
  assert.ok(body.byteLength <= 4000, `${body.byteLength} bytes`);
  const read = passOn(timeout, 3, 1);
  assert.equal(read.code, 'COLL_TIMEOUT', 'the code survives a cut message');
  assert.deepEqual([read.details.rank, read.details.reportedBy], [3, 3]);
  const other = passOn(new TandemError('FABRIC_CLOSED', 'gone', { hint: 'h' }), 2, 0);
  assert.equal(other.code, 'COLL_ABORTED');
});

test('an abort passed on says once who aborted, however often it is relayed', () => {
  const own = new TandemError('COLL_ABORTED', 'rank 0 aborted the communicator: node 2 left', { hint: 'h' });
  const atOne = passOn(own, 0, 1);
  assert.equal(atOne.message, 'rank 0 aborted the communicator: node 2 left');
  // a relayed notice keeps that text; one whose message does not say it gets the prefix
  assert.equal(passOn(atOne, 0, 2).message, 'rank 0 aborted the communicator: node 2 left');
  const bare = passOn(new TandemError('FABRIC_CLOSED', 'gone', { hint: 'h' }), 2, 0);
  assert.equal(bare.message, 'rank 2 aborted the communicator: gone');
});
