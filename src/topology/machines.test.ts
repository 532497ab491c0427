import { test } from 'node:test';
import assert from 'node:assert/strict';
import { maxPlannedMachines, parseMachines } from './machines.js';
import { isTandemError } from '../errors/index.js';

test('a machine list names 1 to maxPlannedMachines machines, each count at least 1', () => {
  for (const [spec, pattern] of [
    ['', /--machines '' names no machine/],
    [',,,', /--machines ',,,' names no machine/],
    ['0x mac-mini-m4-pro', /'0x mac-mini-m4-pro' in --machines asks for 0 machines/],
    ['2x mac-mini-m4-pro, 0x mac-studio-m3-ultra', /asks for 0 machines/],
    [`${maxPlannedMachines + 1}x mac-mini-m4-pro`, /asks for more than 64 machines, the most one plan takes/],
    ['40x mac-mini-m4-pro, 40x mac-studio-m3-ultra', /asks for more than 64 machines/],
    ['99999999999999x mac-mini-m4-pro', /asks for more than 64 machines/],
  ] as const) {
    assert.throws(
      () => parseMachines(spec),
      (e) =>
        isTandemError(e, 'INVALID_ARGUMENT') &&
        pattern.test(e.message) &&
        /write 1 to 64 machines/.test(e.hint),
      spec,
    );
  }
  assert.equal(parseMachines(`${maxPlannedMachines}x mac-mini-m4-pro`).length, maxPlannedMachines);
  assert.equal(parseMachines('2x mac-mini-m4-pro,').length, 2);
});
