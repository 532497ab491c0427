// Writes a GGUF file llama.cpp can load for its tokenizer: the given tokenizer metadata on a
// one-layer llama with zero weights (the oracle only tokenizes).
import { encodeGguf, gv, type TensorSpec } from '../../format/gguf-writer.js';
import type { GgufValue } from '../../format/gguf-types.js';
import type { TokenizerMetadata } from '../metadata.js';

const F32 = 0;

/** `tokenizer.*` GGUF entries for plain tokenizer metadata. */
export function tokenizerEntries(meta: TokenizerMetadata): [string, GgufValue][] {
  const kv: [string, GgufValue][] = [
    ['tokenizer.ggml.model', gv.str(meta.model)],
    ['tokenizer.ggml.tokens', gv.strings([...meta.tokens])],
  ];
  if (meta.pre !== undefined) kv.push(['tokenizer.ggml.pre', gv.str(meta.pre)]);
  if (meta.scores !== undefined) kv.push(['tokenizer.ggml.scores', gv.f32s(Array.from(meta.scores))]);
  if (meta.tokenTypes !== undefined)
    kv.push(['tokenizer.ggml.token_type', gv.i32s(Array.from(meta.tokenTypes))]);
  if (meta.merges !== undefined) kv.push(['tokenizer.ggml.merges', gv.strings([...meta.merges])]);
  if (meta.bosTokenId !== undefined) kv.push(['tokenizer.ggml.bos_token_id', gv.u32(meta.bosTokenId)]);
  if (meta.eosTokenId !== undefined) kv.push(['tokenizer.ggml.eos_token_id', gv.u32(meta.eosTokenId)]);
  if (meta.unknownTokenId !== undefined)
    kv.push(['tokenizer.ggml.unknown_token_id', gv.u32(meta.unknownTokenId)]);
  if (meta.addBosToken !== undefined) kv.push(['tokenizer.ggml.add_bos_token', gv.bool(meta.addBosToken)]);
  if (meta.addEosToken !== undefined) kv.push(['tokenizer.ggml.add_eos_token', gv.bool(meta.addEosToken)]);
  if (meta.addSpacePrefix !== undefined)
    kv.push(['tokenizer.ggml.add_space_prefix', gv.bool(meta.addSpacePrefix)]);
  if (meta.chatTemplate !== undefined) kv.push(['tokenizer.chat_template', gv.str(meta.chatTemplate)]);
  return kv;
}

/** A whole GGUF file (bytes) for a tokenizer: a minimal llama around it. */
export function vocabModelBytes(
  tokenizer: ReadonlyArray<readonly [string, GgufValue]>,
  nVocab: number,
): Uint8Array {
  const nEmbd = 8;
  const nFf = 16;
  const metadata = new Map<string, GgufValue>([
    ['general.architecture', gv.str('llama')],
    ['llama.context_length', gv.u32(64)],
    ['llama.embedding_length', gv.u32(nEmbd)],
    ['llama.block_count', gv.u32(1)],
    ['llama.feed_forward_length', gv.u32(nFf)],
    ['llama.attention.head_count', gv.u32(2)],
    ['llama.attention.layer_norm_rms_epsilon', gv.f32(1e-5)],
    ...tokenizer,
  ]);
  const shapes: [string, number[]][] = [
    ['token_embd.weight', [nEmbd, nVocab]],
    ['output_norm.weight', [nEmbd]],
    ['output.weight', [nEmbd, nVocab]],
    ['blk.0.attn_norm.weight', [nEmbd]],
    ['blk.0.attn_q.weight', [nEmbd, nEmbd]],
    ['blk.0.attn_k.weight', [nEmbd, nEmbd]],
    ['blk.0.attn_v.weight', [nEmbd, nEmbd]],
    ['blk.0.attn_output.weight', [nEmbd, nEmbd]],
    ['blk.0.ffn_norm.weight', [nEmbd]],
    ['blk.0.ffn_gate.weight', [nEmbd, nFf]],
    ['blk.0.ffn_up.weight', [nEmbd, nFf]],
    ['blk.0.ffn_down.weight', [nFf, nEmbd]],
  ];
  const tensors: TensorSpec[] = shapes.map(([name, dims]) => ({ name, dims, type: F32 }));
  const data = shapes.map(([, dims]) => new Uint8Array(4 * dims.reduce((a, b) => a * b, 1)));
  return encodeGguf(metadata, tensors, data);
}
