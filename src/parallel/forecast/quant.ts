import { TandemError } from '../../errors/index.js';

/**
 * Bits a weight takes on average in each format, scales and their share of mixed tensors
 * included: Q4_0 and Q8_0 carry an f16 scale per 32 values (4.5 and 8.5); Q4_K_M mixes
 * Q4_K (4.5) with Q6_K (6.56) for some tensors, about 4.85 over a Llama file (Llama 2 7B
 * Q4_K_M: 4.08 GB for 6.74 B weights); MLX's affine 4 and 8 bit carry a bf16 scale and bias
 * per group of 64 (4.5 and 8.5); int4 as Kimi K2 ships it has a bf16 scale per 32 (4.5);
 * gpt-oss's MXFP4 an 8-bit scale per 32 (4.25).
 */
export const quantBits = {
  q4_0: 4.5,
  q4_k_m: 4.85,
  q8_0: 8.5,
  f16: 16,
  bf16: 16,
  'mlx-4bit': 4.5,
  'mlx-8bit': 8.5,
  int4: 4.5,
  mxfp4: 4.25,
} as const;

export type QuantName = keyof typeof quantBits;

export function parseQuant(name: string): QuantName {
  const q = name.trim().toLowerCase();
  if (q in quantBits) return q as QuantName;
  throw new TandemError('PAR_UNKNOWN_QUANT', `plan: unknown quantization '${name}'`, {
    hint: `use one of: ${Object.keys(quantBits).join(', ')}`,
    details: { quant: name },
  });
}
