import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StopText } from './stop-text.js';

function run(stops: string[], pieces: string[]): { out: string[]; tail: string; stopped: boolean } {
  const s = new StopText(stops);
  const out = pieces.map((p) => s.push(p));
  return { out, tail: s.flush(), stopped: s.stopped };
}

test('StopText releases text that cannot become a stop string, and cuts before the first one found', () => {
  assert.deepEqual(run(['END'], ['ab', 'cd']), { out: ['ab', 'cd'], tail: '', stopped: false });
  // "E" and "EN" could start "END": held back until they cannot
  assert.deepEqual(run(['END'], ['abE', 'N', 'x']), { out: ['ab', '', 'ENx'], tail: '', stopped: false });
  // a stop string spread over three pieces: nothing of it is released
  assert.deepEqual(run(['END'], ['abE', 'N', 'Dzz', 'more']), {
    out: ['ab', '', '', ''],
    tail: '',
    stopped: true,
  });
  // the earliest of several stop strings wins, whichever is listed first
  assert.deepEqual(run(['zz', 'b'], ['azzb']), { out: ['a'], tail: '', stopped: true });
  // held text that never became a stop string comes out at the end
  assert.deepEqual(run(['END'], ['xEN']), { out: ['x'], tail: 'EN', stopped: false });
  assert.deepEqual(run([], ['a', 'b']), { out: ['a', 'b'], tail: '', stopped: false });
});
