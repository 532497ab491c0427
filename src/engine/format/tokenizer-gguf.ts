import type { TokenizerMetadata } from '../tokenizer/metadata.js';
import type { GgufValue } from './gguf-types.js';
import { gv } from './gguf-writer.js';

/** The `tokenizer.*` GGUF keys for tokenizer metadata, typed as llama.cpp's converter writes them. */
export function tokenizerEntries(m: TokenizerMetadata): [string, GgufValue][] {
  const out: [string, GgufValue][] = [['tokenizer.ggml.model', gv.str(m.model)]];
  if (m.pre !== undefined) out.push(['tokenizer.ggml.pre', gv.str(m.pre)]);
  out.push(['tokenizer.ggml.tokens', gv.strings([...m.tokens])]);
  if (m.scores) out.push(['tokenizer.ggml.scores', gv.f32s(Float32Array.from(m.scores))]);
  if (m.tokenTypes) out.push(['tokenizer.ggml.token_type', gv.i32s(Int32Array.from(m.tokenTypes))]);
  if (m.merges) out.push(['tokenizer.ggml.merges', gv.strings([...m.merges])]);
  const ids: [string, number | undefined][] = [
    ['tokenizer.ggml.bos_token_id', m.bosTokenId],
    ['tokenizer.ggml.eos_token_id', m.eosTokenId],
    ['tokenizer.ggml.unknown_token_id', m.unknownTokenId],
  ];
  for (const [key, id] of ids) if (id !== undefined) out.push([key, gv.u32(id)]);
  const flags: [string, boolean | undefined][] = [
    ['tokenizer.ggml.add_bos_token', m.addBosToken],
    ['tokenizer.ggml.add_eos_token', m.addEosToken],
    ['tokenizer.ggml.add_space_prefix', m.addSpacePrefix],
  ];
  for (const [key, flag] of flags) if (flag !== undefined) out.push([key, gv.bool(flag)]);
  if (m.chatTemplate !== undefined) out.push(['tokenizer.chat_template', gv.str(m.chatTemplate)]);
  return out;
}
