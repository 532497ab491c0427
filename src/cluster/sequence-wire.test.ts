import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { greedyPick } from '../engine/sampling/index.js';
import { decodeRows, encodeRows, parseForward, parseMixed } from './sequence-wire.js';

/*
 * The serving steps' wire, checked once at the node's edge: a well-formed step comes out as
 * typed fields; anything else is a CLUSTER_PROTOCOL error naming what was wrong (the node
 * answers it as a failed request and keeps running), never a crash or a step run on bad ids.
 */

const VOCAB = 100;

const mixed = {
  type: 'forward-mixed',
  prefill: { seq: 1, tokens: [5, 6, 7] },
  decode: { seqs: [2, 3], tokens: [8, 9] },
  reset: [1],
  onePass: true,
};

/** Asserts that parsing `m` throws CLUSTER_PROTOCOL with a message matching `what`. */
function refused(parse: () => unknown, what: RegExp): void {
  assert.throws(parse, (e) => isTandemError(e, 'CLUSTER_PROTOCOL') && what.test(e.message) && e.hint !== '');
}

describe('forward-mixed', () => {
  test('a well-formed step: the piece, the rows, the resets, the cuts and the pass mode', () => {
    assert.deepEqual(parseMixed(mixed, VOCAB), {
      prefill: { seq: 1, tokens: [5, 6, 7] },
      decode: { seqs: [2, 3], tokens: [8, 9] },
      reset: [1],
      keep: [],
      onePass: true,
      needs: ['logits', 'logits', 'logits'],
    });
    assert.deepEqual(parseMixed({ ...mixed, reset: undefined, onePass: false }, VOCAB).reset, []);
    assert.deepEqual(parseMixed({ ...mixed, keep: [[3, 40]] }, VOCAB).keep, [[3, 40]]);
    const needs = ['none', 'argmax', 'logits'];
    assert.deepEqual(parseMixed({ ...mixed, needs }, VOCAB).needs, needs);
  });

  test('bad ids, shapes and flags are refused, each naming what was wrong', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ prefill: { seq: 1, tokens: [5, VOCAB] } }, /prefill\.tokens \(ids below 100\)/],
      [{ decode: { seqs: [2, 3], tokens: [8, -1] } }, /decode\.tokens/],
      [{ prefill: { seq: 'a', tokens: [5] } }, /prefill\.seq/],
      [{ prefill: 7 }, /prefill\.seq/],
      [{ decode: null }, /decode\.seqs/],
      [{ prefill: { seq: 1, tokens: [] } }, /no prompt piece or no decode row/],
      [{ decode: { seqs: [], tokens: [] } }, /no prompt piece or no decode row/],
      [{ decode: { seqs: [2, 3], tokens: [8] } }, /one decode token per distinct sequence/],
      [{ decode: { seqs: [2, 2], tokens: [8, 9] } }, /one decode token per distinct sequence/],
      [{ decode: { seqs: [1, 3], tokens: [8, 9] } }, /sequence once/],
      [{ reset: [4] }, /reset names a sequence/],
      [{ keep: [[4, 10]] }, /keep names a sequence/],
      [{ keep: [[1, 10]] }, /keep names a sequence .* it resets/],
      [
        {
          keep: [
            [2, 10],
            [2, 5],
          ],
        },
        /keep names a sequence twice/,
      ],
      [{ keep: [[2, -1]] }, /keep \(\[sequence id, positions\] pairs\)/],
      [{ keep: [[2, 1.5]] }, /keep \(/],
      [{ keep: [2, 10] }, /keep \(/],
      [{ keep: { 2: 10 } }, /keep \(/],
      [{ onePass: 'yes' }, /onePass/],
      [{ needs: ['logits', 'argmax'] }, /needs \(3 of/],
      [{ needs: ['logits', 'argmax', 'top'] }, /needs/],
      [{ needs: 'logits' }, /needs/],
    ];
    for (const [change, what] of cases) refused(() => parseMixed({ ...mixed, ...change }, VOCAB), what);
  });
});

describe('forward and forward-batch', () => {
  test('a prompt chunk takes one sequence, a decode step one token per distinct sequence', () => {
    assert.deepEqual(parseForward({ type: 'forward', seqs: [4], tokens: [1, 2, 3] }, VOCAB), {
      seqs: [4],
      tokens: [1, 2, 3],
      single: true,
      reset: [],
      keep: [],
      needs: ['logits'],
    });
    assert.deepEqual(
      parseForward({ type: 'forward-batch', seqs: [4, 5], tokens: [1, 2], keep: [[5, 30]] }, VOCAB).keep,
      [[5, 30]],
    );
    refused(
      () => parseForward({ type: 'forward', seqs: [4], tokens: [1], reset: [4], keep: [[4, 3]] }, VOCAB),
      /keep names/,
    );
    assert.deepEqual(
      parseForward({ type: 'forward-batch', seqs: [4, 5], tokens: [1, 2], needs: ['argmax', 'none'] }, VOCAB)
        .needs,
      ['argmax', 'none'],
    );
    refused(
      () => parseForward({ type: 'forward-batch', seqs: [4, 5], tokens: [1, 2], needs: ['argmax'] }, VOCAB),
      /needs \(2 of/,
    );
    assert.equal(parseForward({ type: 'forward-batch', seqs: [4, 5], tokens: [1, 2] }, VOCAB).single, false);
    refused(() => parseForward({ type: 'forward', seqs: [4, 5], tokens: [1, 2] }, VOCAB), /one sequence/);
    refused(
      () => parseForward({ type: 'forward-batch', seqs: [4, 4], tokens: [1, 2] }, VOCAB),
      /one token per distinct sequence/,
    );
    refused(() => parseForward({ type: 'forward', seqs: [4], tokens: [VOCAB] }, VOCAB), /ids below/);
  });
});

test('each row crosses the wire as its need asks: logits bit for bit, a token id, or nothing', () => {
  const rows = [
    Float32Array.from([1.5, -0, 2, 3e-39]),
    Float32Array.from([-2, 7, 7, -1e-45]),
    Float32Array.from([0, 0, 0, 0]),
    Float32Array.from([-Infinity, 1e30, -1, 5]),
  ];
  const needs = ['logits', 'argmax', 'none', 'logits'] as const;
  const answer = encodeRows(rows, needs);
  // the argmax row: the lowest id holding the largest logit, as a greedy sampler picks
  assert.deepEqual(answer.argmax, [1]);
  const back = decodeRows(JSON.parse(JSON.stringify(answer)), needs, 4);
  assert.equal(back[1], 1);
  assert.equal(back[2], undefined);
  const bits = (r: unknown): number[] => [...new Uint32Array((r as Float32Array).slice().buffer)];
  assert.deepEqual([back[0], back[3]].map(bits), [rows[0], rows[3]].map(bits));
  refused(
    () => decodeRows(answer, ['logits', 'logits', 'logits', 'argmax'], 4),
    /logits of 32 bytes for 3 row/,
  );
  refused(
    () => decodeRows(answer, ['logits', 'argmax', 'argmax', 'logits'], 4),
    /1 argmax answer\(s\) for the step's 2 argmax row\(s\)/,
  );
  refused(() => decodeRows({ ...answer, argmax: [4] }, needs, 4), /argmax \(ids below 4, or null\)/);
  // a row the forward broke cannot be picked: it is answered whole, and the server's sampler
  // refuses it for its request alone (the step and the other rows go on)
  const broken = Float32Array.from([0, NaN, 1, 2]);
  const mixed = encodeRows([broken, rows[1]!], ['argmax', 'argmax']);
  assert.deepEqual(mixed.argmax, [null, 1]);
  const [whole, token] = decodeRows(JSON.parse(JSON.stringify(mixed)), ['argmax', 'argmax'], 4);
  assert.equal(token, 1);
  assert.ok(whole instanceof Float32Array);
  assert.deepEqual(bits(whole), bits(broken));
  assert.throws(
    () => greedyPick(whole),
    (e) => isTandemError(e, 'SAMPLER_LOGITS') && /logit 1 is NaN/.test(e.message),
  );
});
