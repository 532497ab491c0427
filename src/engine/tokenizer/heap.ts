/** A binary heap; `before(a, b)` is true when a must come out before b. */
export class Heap<T> {
  private readonly items: T[] = [];
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    const a = this.items;
    let i = a.length;
    a.push(item);
    // Move the hole up instead of swapping: one write per level.
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = a[p] as T;
      if (!this.before(item, parent)) break;
      a[i] = parent;
      i = p;
    }
    a[i] = item;
  }

  pop(): T | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0] as T;
    const last = a.pop() as T;
    const n = a.length;
    if (n === 0) return top;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && this.before(a[c + 1] as T, a[c] as T)) c++;
      const child = a[c] as T;
      if (!this.before(child, last)) break;
      a[i] = child;
      i = c;
    }
    a[i] = last;
    return top;
  }
}
