/**
 * Tokens routed to each expert of each MoE layer on this node: `totals` counts every choice
 * since load; `recent` is a decaying window (each layer's counts halve every `halfLife` of its
 * choices), the load a placement should follow now. Indexed [layer * experts + expert], layers
 * counted from the shard's first.
 */
export class ExpertLoad {
  readonly totals: Float64Array;
  readonly recent: Float64Array;

  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly halfLife = 4096,
  ) {
    this.totals = new Float64Array(layers * experts);
    this.recent = new Float64Array(layers * experts);
  }

  /** Records one layer's choices (expert ids, any count). */
  record(layer: number, ids: ArrayLike<number>): void {
    if (ids.length === 0 || layer < 0 || layer >= this.layers) return;
    const base = layer * this.experts;
    const decay = Math.pow(0.5, ids.length / this.halfLife);
    for (let e = 0; e < this.experts; e++) this.recent[base + e]! *= decay;
    for (let i = 0; i < ids.length; i++) {
      const e = ids[i]!;
      if (e < 0 || e >= this.experts) continue;
      this.totals[base + e]!++;
      this.recent[base + e]!++;
    }
  }

  /** Each expert's share of one layer's choices (all layers summed when `layer` is omitted); sums to 1. */
  shares(layer?: number, which: 'totals' | 'recent' = 'totals'): number[] {
    const src = this[which];
    const out = new Array<number>(this.experts).fill(0);
    for (let l = 0; l < this.layers; l++) {
      if (layer !== undefined && l !== layer) continue;
      for (let e = 0; e < this.experts; e++) out[e]! += src[l * this.experts + e]!;
    }
    const sum = out.reduce((a, b) => a + b, 0);
    return sum > 0 ? out.map((v) => v / sum) : out;
  }
}
