import { test } from 'node:test';
import assert from 'node:assert/strict';
import { drawShape, renderTopology } from './draw.js';
import { graphOf } from './testing.js';

test('draws a ring closed, a line open, a star fanned out, anything else as a matrix', () => {
  const ring = drawShape(graphOf('a-b b-c c-d d-a'));
  assert.equal(ring[0], '┌─ [a] ── [b] ── [c] ── [d] ─┐');
  assert.equal(ring[1]?.length, ring[0]?.length);
  assert.deepEqual(drawShape(graphOf('a-b b-c')), ['[a] ── [b] ── [c]']);
  const star = drawShape(graphOf('hub-x hub-y hub-z'));
  assert.equal(star.length, 3);
  assert.match(star[0] as string, /\[hub\]/);
  assert.equal(star[2], '[x]  [y]  [z]');
  assert.match(star[1] as string, /┌.*┼.*┐/);
  const partial = drawShape(graphOf('a-b b-c c-d d-a a-c'));
  assert.match(partial[1] as string, /a\s+╲\s+●\s+●\s+●/);
  assert.match(partial[2] as string, /b\s+●\s+╲\s+●\s+·/);
});

test('renders class, links and measured figures', () => {
  const g = graphOf('a-b b-c');
  (g.links[0] as { latencyUs?: number }).latencyUs = 12.34;
  const text = renderTopology(g);
  assert.match(text, /topology: line \(3 hosts, 2 links, max 2 hops\)/);
  assert.match(text, /a:p0\s+b:p0\s+ethernet\s+12\.3 us\s+-/);
  assert.match(text, /1 pair\(s\) without a cable/);
});
