/**
 * Finds stop strings in streamed text. Text that could still turn into a stop string is held
 * back until it cannot, so what is released never contains one, even when a stop string
 * spans several tokens.
 */
export class StopText {
  private held = '';
  private done = false;

  constructor(private readonly stops: readonly string[]) {}

  /** Whether a stop string was found (nothing more is released after it). */
  get stopped(): boolean {
    return this.done;
  }

  /** Adds text; returns what is now safe to release (everything before a stop string found). */
  push(text: string): string {
    if (this.done) return '';
    this.held += text;
    let cut = -1;
    for (const stop of this.stops) {
      const at = this.held.indexOf(stop);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      this.done = true;
      const out = this.held.slice(0, cut);
      this.held = '';
      return out;
    }
    const keep = this.pendingLength();
    const out = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    return out;
  }

  /** The end of the text: whatever was held back (it did not become a stop string). */
  flush(): string {
    const out = this.held;
    this.held = '';
    return this.done ? '' : out;
  }

  /** Length of the longest end of the held text that is the start of a stop string. */
  private pendingLength(): number {
    let best = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, this.held.length); n > best; n--) {
        if (this.held.endsWith(stop.slice(0, n))) {
          best = n;
          break;
        }
      }
    }
    return best;
  }
}
