import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mapWcStatus, verbsAccess } from './rdma-resources.js';
import { IBV, WC_STATUS_NAMES } from './rdma-verbs-enums.js';
import { Access } from './types.js';

test('rdma completions: every verbs status maps to a fabric status; only SUCCESS is success', () => {
  const at = (name: string): number => WC_STATUS_NAMES.indexOf(name as (typeof WC_STATUS_NAMES)[number]);
  assert.equal(mapWcStatus(0), 'success');
  assert.equal(mapWcStatus(at('LOC_LEN_ERR')), 'local_length');
  assert.equal(mapWcStatus(at('LOC_PROT_ERR')), 'local_protection');
  assert.equal(mapWcStatus(at('WR_FLUSH_ERR')), 'flushed');
  assert.equal(mapWcStatus(at('REM_ACCESS_ERR')), 'remote_access');
  assert.equal(mapWcStatus(at('REM_INV_REQ_ERR')), 'remote_invalid');
  assert.equal(mapWcStatus(at('RETRY_EXC_ERR')), 'peer_lost');
  assert.equal(mapWcStatus(at('RNR_RETRY_EXC_ERR')), 'peer_lost');
  assert.equal(mapWcStatus(999), 'remote_invalid');
  for (let s = 1; s < WC_STATUS_NAMES.length; s++) assert.notEqual(mapWcStatus(s), 'success');
  // verbs.h values the table is indexed by.
  assert.deepEqual(
    [at('LOC_LEN_ERR'), at('LOC_PROT_ERR'), at('WR_FLUSH_ERR'), at('REM_ACCESS_ERR')],
    [1, 4, 5, 10],
  );
  assert.deepEqual([at('RETRY_EXC_ERR'), at('GENERAL_ERR')], [12, 21]);
});

test('rdma access: the fabric flags as verbs flags; remote write implies local write', () => {
  assert.equal(verbsAccess(Access.NONE), 0);
  assert.equal(verbsAccess(Access.LOCAL_WRITE), IBV.ACCESS_LOCAL_WRITE);
  assert.equal(verbsAccess(Access.REMOTE_WRITE), IBV.ACCESS_REMOTE_WRITE | IBV.ACCESS_LOCAL_WRITE);
  assert.equal(verbsAccess(Access.REMOTE_READ), IBV.ACCESS_REMOTE_READ);
});
