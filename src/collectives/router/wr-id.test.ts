import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWrId, PUT_SLOT, WrKind, wrIdKind, wrIdLink, wrIdSlot } from './wr-id.js';

test('a work-request id gives back the link, slot and kind it was built from', () => {
  for (const link of [0, 1, 7, 32767]) {
    for (const slot of [0, 1, 15, 255, PUT_SLOT]) {
      for (const kind of [WrKind.send, WrKind.recv]) {
        const id = encodeWrId(link, slot, kind);
        assert.ok(id >= 0 && id < 2 ** 31, `id ${id} stays a positive int32`);
        assert.deepEqual(
          [wrIdLink(id), wrIdSlot(id), wrIdKind(id)],
          [link, slot, kind],
          `link ${link} slot ${slot} kind ${kind}`,
        );
      }
    }
  }
});

test('the layout is link * 65536 + slot * 2 + kind', () => {
  assert.equal(encodeWrId(3, 5, WrKind.recv), 3 * 65536 + 5 * 2 + 1);
  assert.equal(encodeWrId(2, PUT_SLOT, WrKind.send), 2 * 65536 + 0xfffe);
});
