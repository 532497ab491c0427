/**
 * Rotary position embedding for training, llama's 'normal' style: pairs (2i, 2i + 1) of each
 * head rotate by pos * base^(-2i / headDim). The backward is the rotation by the opposite
 * angle (a rotation's transpose is its inverse).
 */
export interface RopeTable {
  headDim: number;
  /** [positions, headDim / 2] each. */
  cos: Float32Array;
  sin: Float32Array;
}

export function ropeTable(positions: number, headDim: number, base: number): RopeTable {
  const half = headDim / 2;
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      // the engine's angle: theta = p * base^(-2i/d) in f32 as llama.cpp computes it
      const theta = p * Math.pow(base, (-2 * i) / headDim);
      cos[p * half + i] = Math.cos(theta);
      sin[p * half + i] = Math.sin(theta);
    }
  }
  return { headDim, cos, sin };
}

/**
 * Rotates x in place. x: [rows, seq, heads, headDim] flattened (row b's token t sits at
 * position t); sign 1 forward, -1 backward.
 */
export function ropeApply(
  x: Float32Array,
  table: RopeTable,
  rows: number,
  seq: number,
  heads: number,
  sign: 1 | -1,
): void {
  const d = table.headDim;
  const half = d / 2;
  for (let b = 0; b < rows; b++) {
    for (let t = 0; t < seq; t++) {
      for (let h = 0; h < heads; h++) {
        const o = ((b * seq + t) * heads + h) * d;
        for (let i = 0; i < half; i++) {
          const c = table.cos[t * half + i] as number;
          const s = sign * (table.sin[t * half + i] as number);
          const x0 = x[o + 2 * i] as number;
          const x1 = x[o + 2 * i + 1] as number;
          x[o + 2 * i] = x0 * c - x1 * s;
          x[o + 2 * i + 1] = x0 * s + x1 * c;
        }
      }
    }
  }
}
