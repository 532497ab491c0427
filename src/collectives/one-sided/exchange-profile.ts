import { performance } from 'node:perf_hooks';
import type { Pair } from './slots.js';
import type { SlotViews } from './part-codec.js';

/** TANDEM_TP_PROFILE=1: the direct exchange stamps its writes and reports how its waits split. */
export const profiling = process.env.TANDEM_TP_PROFILE === '1';
const profileEvery = Number(process.env.TANDEM_TP_PROFILE_EVERY ?? 1000) || 1000;

/** Where the send time goes in a slot: the first 8-byte boundary after a payload of `bytes`. */
export function stampAt(bytes: number): number {
  return Math.ceil(bytes / 8) * 8;
}

/**
 * The send time travels after the payload, so the receiver can tell waiting for a late peer
 * from transfer and wake-up time. Returns the bytes to write (payload and stamp).
 */
export function stamp(out: SlotViews, bytes: number, sentAt: number): number {
  const at = stampAt(bytes);
  new DataView(out.u8.buffer, out.u8.byteOffset + at, 8).setFloat64(0, sentAt, true);
  return at + 8;
}

/** Every `TANDEM_TP_PROFILE_EVERY` (1000) exchanges, one stderr line splitting the wait. */
export class ExchangeProfile {
  private calls = 0;
  private wait = 0;
  private late = 0;
  private since = 0;

  constructor(
    private readonly rank: number,
    private readonly size: number,
  ) {}

  /** An exchange sent at `sentAt` is done: its peers' stamps (at byte `at` of their slots) say when they sent. */
  record(inViews: readonly (Pair<SlotViews> | undefined)[], slot: 0 | 1, sentAt: number, at: number): void {
    const done = performance.timeOrigin + performance.now();
    let lastPeer = sentAt;
    for (let r = 0; r < this.size; r++) {
      if (r === this.rank) continue;
      const u8 = inViews[r]![slot].u8;
      lastPeer = Math.max(lastPeer, new DataView(u8.buffer, u8.byteOffset + at, 8).getFloat64(0, true));
    }
    if (this.calls === 0) this.since = sentAt;
    this.calls++;
    this.wait += done - sentAt;
    this.late += lastPeer - sentAt;
    if (this.calls === profileEvery) {
      const wall = done - this.since;
      process.stderr.write(
        `tp-exchange rank ${this.rank}/${this.size}: ${this.calls} exchanges in ${wall.toFixed(1)} ms: ` +
          `waiting ${this.wait.toFixed(1)} ms (for the slower rank ${this.late.toFixed(1)} ms, ` +
          `transfer and wake-up ${(this.wait - this.late).toFixed(1)} ms), the rest ${(wall - this.wait).toFixed(1)} ms\n`,
      );
      this.calls = this.wait = this.late = this.since = 0;
    }
  }
}
