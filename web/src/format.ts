/** Bytes as MiB or GiB, one decimal. */
export function bytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(1)} MiB`;
}

/** A Unix-milliseconds time as the local clock's hh:mm:ss. */
export function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}
