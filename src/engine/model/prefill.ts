import { GEMM_TOKENS } from '../../kernels/types.js';

/**
 * Prompt tokens per prefill piece that the server runs between decode steps by default: a
 * multiple of GEMM_TOKENS and of the native GEMM's 15-token lane groups, small enough that
 * running streams wait one short forward for it, large enough that the GEMM stays efficient.
 */
export const PREFILL_CHUNK = 120;

/**
 * Prompt tokens per prefill piece while other streams decode along with it (Model.forwardMixed)
 * where the kernels name no GEMM lane group: two of NEON's 15-token groups. Each piece carries
 * one decode step of every running stream, so smaller pieces give running streams more tokens
 * during a prefill, while a piece still costs about as much compute as streaming the weights
 * once.
 */
export const MIXED_PREFILL_CHUNK = 30;

/**
 * The longest prompt piece a serving step takes beside running streams (`tandem serve
 * --prefill-chunk`): every running stream waits for the whole piece, and a pipeline stage
 * holds the piece's activations at once.
 */
export const MAX_PREFILL_PIECE = 1024;

/**
 * The mixed piece for kernels whose GEMM runs tokens in lane groups of `group`: two whole
 * groups (32 tokens on x86 VNNI, 30 on NEON), so that no piece pays for empty lanes but the
 * last one of a prompt (prefillPiece gives it the remainder).
 */
export function mixedPrefillChunk(group: number | undefined): number {
  return group !== undefined && group > 0 ? 2 * group : MIXED_PREFILL_CHUNK;
}

/**
 * The length of the next prefill piece when `remaining` prompt tokens are left and pieces
 * are about `chunk` long: `chunk` (at least GEMM_TOKENS), or all that remains when a piece of
 * `chunk` would leave fewer than GEMM_TOKENS behind. So a prompt of GEMM_TOKENS or more
 * tokens is cut only into pieces of GEMM_TOKENS or more, and a shorter one is not cut: each
 * token goes through the kernels' same size class (kernels/types.ts) whatever the chunk, and
 * a prompt prefilled in pieces gives the logits, bit for bit, of any other cut of it.
 */
export function prefillPiece(remaining: number, chunk: number): number {
  const size = Math.max(Math.floor(chunk), GEMM_TOKENS);
  return remaining < size + GEMM_TOKENS ? remaining : size;
}
