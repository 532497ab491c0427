/** A contiguous run of elements: [offset, offset + count). */
export interface Range {
  offset: number;
  count: number;
}

/**
 * Splits `count` elements into `parts` contiguous ranges whose sizes differ by at most one
 * `align`-element unit; the first `units % parts` ranges get the extra unit, the last range
 * is clipped at `count`. Works for any count, including 0 and counts below `parts`
 * (trailing ranges are then empty). `align` keeps q8 blocks (32 values) whole.
 */
export function chunkRanges(count: number, parts: number, align = 1): Range[] {
  const units = Math.ceil(count / align);
  const base = Math.floor(units / parts);
  const extra = units % parts;
  const out: Range[] = [];
  let unitOffset = 0;
  for (let i = 0; i < parts; i++) {
    const u = base + (i < extra ? 1 : 0);
    const offset = Math.min(count, unitOffset * align);
    const end = Math.min(count, (unitOffset + u) * align);
    out.push({ offset, count: end - offset });
    unitOffset += u;
  }
  return out;
}

/** Splits a range into `parts` sub-ranges the same way (used to stripe a chunk over lanes). */
export function splitRange(r: Range, parts: number, align = 1): Range[] {
  return chunkRanges(r.count, parts, align).map((s) => ({ offset: r.offset + s.offset, count: s.count }));
}
