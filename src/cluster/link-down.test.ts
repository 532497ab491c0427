import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TandemError } from '../errors/index.js';
import { brokenLink } from './link-down.js';

const lost = (details: Record<string, unknown>): PromiseSettledResult<unknown> => ({
  status: 'rejected',
  reason: new TandemError('COLL_PEER_LOST', 'rank 1 lost its link to rank 0', { hint: 'h', details }),
});

test('a step whose member lost its link to another names the pair, lower rank first', () => {
  assert.deepEqual(
    brokenLink([{ status: 'fulfilled', value: {} }, lost({ rank: 0, reportedBy: 2 })]),
    [0, 2],
  );
  assert.deepEqual(brokenLink([lost({ rank: 3, reportedBy: 1 })]), [1, 3]);
});

test('the first answer that names a pair wins; a peer that closed its communicator names none', () => {
  // rank 2 lost rank 0; rank 0 then saw rank 1, aborting, drop its link
  assert.deepEqual(brokenLink([lost({ rank: 0, reportedBy: 2 }), lost({ rank: 1, reportedBy: 0 })]), [0, 2]);
  assert.deepEqual(
    brokenLink([lost({ rank: 1, reportedBy: 0, left: true }), lost({ rank: 0, reportedBy: 2 })]),
    [0, 2],
  );
  assert.equal(brokenLink([lost({ rank: 1, reportedBy: 0, left: true })]), undefined);
});

test('other failures name no link', () => {
  const other: PromiseSettledResult<unknown> = {
    status: 'rejected',
    reason: new TandemError('COLL_TIMEOUT', 'timed out', { hint: 'h', details: { rank: 0, reportedBy: 1 } }),
  };
  assert.equal(brokenLink([other, { status: 'rejected', reason: new Error('x') }]), undefined);
  assert.equal(brokenLink([lost({ rank: 1 }), lost({ rank: 1, reportedBy: 1 })]), undefined);
  assert.equal(brokenLink([{ status: 'fulfilled', value: 1 }]), undefined);
});
