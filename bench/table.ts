/** A plain-text table: the first column left-aligned, the others right-aligned, two spaces apart. */
export function formatTable(head: readonly string[], body: readonly (readonly string[])[]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] as string).length)));
  return (
    [head, ...body]
      .map((cells) =>
        cells
          .map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number)))
          .join('  '),
      )
      .join('\n') + '\n'
  );
}
