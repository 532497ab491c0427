import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Heap } from './heap.js';

it('Heap pops in order, ties as the comparator says', () => {
  const h = new Heap<[number, number]>((a, b) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]));
  const items: [number, number][] = [];
  let x = 12345;
  for (let i = 0; i < 2000; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    items.push([x % 50, i]);
  }
  for (const it of items.slice(0, 1000)) h.push(it);
  const out: [number, number][] = [];
  for (let i = 0; i < 500; i++) out.push(h.pop() as [number, number]);
  for (const it of items.slice(1000)) h.push(it);
  while (h.size > 0) out.push(h.pop() as [number, number]);
  assert.equal(h.pop(), undefined);
  const firstHalf = out.slice(0, 500);
  assert.deepEqual(
    firstHalf,
    [...items.slice(0, 1000)].sort((a, b) => a[0] - b[0] || a[1] - b[1]).slice(0, 500),
  );
  const rest = out.slice(500);
  const remaining = [...items.slice(0, 1000)]
    .sort((a, b) => a[0] - b[0] || a[1] - b[1])
    .slice(500)
    .concat(items.slice(1000))
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  assert.deepEqual(rest, remaining);
});
