// Writes a GGUF that llama.cpp loads: the given tokenizer metadata on a one-layer llama
// with zero weights (the oracle only tokenizes).
import type { TokenizerMetadata } from '../metadata.js';
import { writeGguf, type GgufValue, type ZeroTensor } from './gguf-vocab-file.js';

export function writeVocabModel(path: string, meta: TokenizerMetadata): void {
  const nEmbd = 8;
  const nFf = 16;
  const nVocab = meta.tokens.length;
  const kv: [string, GgufValue][] = [
    ['general.architecture', { type: 'str', value: 'llama' }],
    ['llama.context_length', { type: 'u32', value: 64 }],
    ['llama.embedding_length', { type: 'u32', value: nEmbd }],
    ['llama.block_count', { type: 'u32', value: 1 }],
    ['llama.feed_forward_length', { type: 'u32', value: nFf }],
    ['llama.attention.head_count', { type: 'u32', value: 2 }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: 1e-5 }],
    ['tokenizer.ggml.model', { type: 'str', value: meta.model }],
    ['tokenizer.ggml.tokens', { type: 'str[]', value: meta.tokens }],
  ];
  if (meta.pre !== undefined) kv.push(['tokenizer.ggml.pre', { type: 'str', value: meta.pre }]);
  if (meta.scores !== undefined)
    kv.push(['tokenizer.ggml.scores', { type: 'f32[]', value: Array.from(meta.scores) }]);
  if (meta.tokenTypes !== undefined)
    kv.push(['tokenizer.ggml.token_type', { type: 'i32[]', value: Array.from(meta.tokenTypes) }]);
  if (meta.merges !== undefined) kv.push(['tokenizer.ggml.merges', { type: 'str[]', value: meta.merges }]);
  if (meta.bosTokenId !== undefined)
    kv.push(['tokenizer.ggml.bos_token_id', { type: 'u32', value: meta.bosTokenId }]);
  if (meta.eosTokenId !== undefined)
    kv.push(['tokenizer.ggml.eos_token_id', { type: 'u32', value: meta.eosTokenId }]);
  if (meta.addBosToken !== undefined)
    kv.push(['tokenizer.ggml.add_bos_token', { type: 'bool', value: meta.addBosToken }]);
  if (meta.addSpacePrefix !== undefined)
    kv.push(['tokenizer.ggml.add_space_prefix', { type: 'bool', value: meta.addSpacePrefix }]);
  const tensors: ZeroTensor[] = [
    { name: 'token_embd.weight', dims: [nEmbd, nVocab] },
    { name: 'output_norm.weight', dims: [nEmbd] },
    { name: 'output.weight', dims: [nEmbd, nVocab] },
    { name: 'blk.0.attn_norm.weight', dims: [nEmbd] },
    { name: 'blk.0.attn_q.weight', dims: [nEmbd, nEmbd] },
    { name: 'blk.0.attn_k.weight', dims: [nEmbd, nEmbd] },
    { name: 'blk.0.attn_v.weight', dims: [nEmbd, nEmbd] },
    { name: 'blk.0.attn_output.weight', dims: [nEmbd, nEmbd] },
    { name: 'blk.0.ffn_norm.weight', dims: [nEmbd] },
    { name: 'blk.0.ffn_gate.weight', dims: [nEmbd, nFf] },
    { name: 'blk.0.ffn_up.weight', dims: [nEmbd, nFf] },
    { name: 'blk.0.ffn_down.weight', dims: [nFf, nEmbd] },
  ];
  writeGguf(path, kv, tensors);
}
