// Writes a GGUF model (a generated test model) out as a Hugging Face model folder, or as an
// MLX affine-quantized one, from the formats' documented layouts, so the tests can check that
// tandem reads a folder as the GGUF it came from. Nothing here is used outside tests.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GgmlType, f32ToF16, f16ToF32, quantize } from '../../kernels/quant/index.js';
import { GgufFile } from '../format/gguf-reader.js';
import { parseHfConfig } from '../format/hf-config.js';
import { tensorRecipes, type TensorRecipe } from '../format/hf-arch.js';
import { LLAMA3_ROPE } from '../format/model-plan.js';
import { encodeSafetensors } from '../format/safetensors.js';
import { TokenType, tokenizerMetadataFromGguf, type TokenizerMetadata } from '../tokenizer/metadata.js';

export interface HfExportOptions {
  dtype: 'F32' | 'F16' | 'BF16';
  /** Split the weights over this many shards with an index (default 1: model.safetensors). */
  shards?: number;
  /** Write every matrix MLX affine-quantized (scales and biases in F16), experts stacked as switch_mlp. */
  mlx?: { bits: number; groupSize: number };
}

const MODEL_TYPES: Record<string, string> = {
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen2moe: 'qwen2_moe',
  qwen3moe: 'qwen3_moe',
};

const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function configOf(g: GgufFile): Record<string, unknown> {
  const arch = g.architecture;
  const m = (k: string): unknown => {
    const v = g.metadata.get(`${arch}.${k}`)?.value;
    return typeof v === 'bigint' ? Number(v) : v;
  };
  const embd = m('embedding_length') as number;
  const heads = m('attention.head_count') as number;
  const experts = (m('expert_count') as number | undefined) ?? 0;
  const tok = tokenizerMetadataFromGguf(g.metadata.entries);
  const c: Record<string, unknown> = {
    architectures: ['TestForCausalLM'],
    model_type: arch === 'llama' ? (experts > 0 ? 'mixtral' : 'llama') : MODEL_TYPES[arch],
    hidden_size: embd,
    intermediate_size: m('feed_forward_length'),
    num_hidden_layers: m('block_count'),
    num_attention_heads: heads,
    num_key_value_heads: m('attention.head_count_kv'),
    head_dim: (m('attention.key_length') as number | undefined) ?? embd / heads,
    vocab_size: g.tensor('token_embd.weight').dims[1],
    max_position_embeddings: m('context_length'),
    rms_norm_eps: m('attention.layer_norm_rms_epsilon'),
    rope_theta: m('rope.freq_base'),
    tie_word_embeddings: !g.hasTensor('output.weight'),
    bos_token_id: tok.bosTokenId,
    eos_token_id: tok.eosTokenId,
  };
  if (g.hasTensor('rope_freqs.weight'))
    c.rope_scaling = {
      rope_type: 'llama3',
      factor: LLAMA3_ROPE.factor,
      low_freq_factor: LLAMA3_ROPE.lowFreqFactor,
      high_freq_factor: LLAMA3_ROPE.highFreqFactor,
      original_max_position_embeddings: LLAMA3_ROPE.originalContext,
    };
  if (experts > 0) {
    c[arch === 'llama' ? 'num_local_experts' : 'num_experts'] = experts;
    c.num_experts_per_tok = m('expert_used_count');
    if (arch !== 'llama') c.moe_intermediate_size = m('expert_feed_forward_length');
    if (arch === 'qwen2moe') c.shared_expert_intermediate_size = m('expert_shared_feed_forward_length');
  }
  return c;
}

/** tokenizer.json and tokenizer_config.json for a GGUF vocabulary (see tokenizer-json.ts for the mapping back). */
export function tokenizerFiles(t: TokenizerMetadata): { tokenizer: unknown; config: unknown } {
  const types = t.tokenTypes ?? [];
  const special = (id: number): boolean => types[id] === TokenType.control || types[id] === TokenType.unknown;
  const added = t.tokens.flatMap((content, id) =>
    special(id) ? [{ id, content, special: true, normalized: false }] : [],
  );
  const vocab: Record<string, number> = {};
  t.tokens.forEach((tok, id) => (vocab[tok] = id));
  const spm = t.model === 'llama';
  const merges = spm ? spmMerges(t) : [...(t.merges ?? [])];
  const bos = t.bosTokenId === undefined ? null : t.tokens[t.bosTokenId];
  const model = {
    type: 'BPE',
    unk_token: spm ? t.tokens[t.unknownTokenId ?? 0] : null,
    byte_fallback: spm,
    vocab,
    merges,
  };
  const tokenizer = spm
    ? {
        added_tokens: added,
        normalizer: {
          type: 'Sequence',
          normalizers: [
            { type: 'Prepend', prepend: '▁' },
            { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
          ],
        },
        pre_tokenizer: null,
        model,
      }
    : {
        added_tokens: added,
        pre_tokenizer: {
          type: 'Sequence',
          pretokenizers: [
            {
              type: 'Split',
              pattern: { Regex: t.pre === 'qwen2' ? QWEN2_SPLIT : LLAMA3_SPLIT },
              behavior: 'Isolated',
              invert: false,
            },
            { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
          ],
        },
        model,
      };
  const config = {
    bos_token: bos,
    eos_token: t.eosTokenId === undefined ? null : t.tokens[t.eosTokenId],
    add_bos_token: t.addBosToken ?? spm,
    add_eos_token: false,
    ...(t.chatTemplate !== undefined ? { chat_template: t.chatTemplate } : {}),
  };
  return { tokenizer, config };
}

/** Merges for a SentencePiece vocabulary, as `tokenizers` derives them: every split of a piece into two pieces, by the piece's score. */
function spmMerges(t: TokenizerMetadata): string[] {
  const ids = new Map(t.tokens.map((tok, id) => [tok, id]));
  const scores = t.scores ?? [];
  const out: { left: number; right: number; score: number; id: number }[] = [];
  t.tokens.forEach((tok, id) => {
    if ((t.tokenTypes?.[id] ?? TokenType.normal) !== TokenType.normal) return;
    const chars = Array.from(tok);
    for (let k = 1; k < chars.length; k++) {
      const left = ids.get(chars.slice(0, k).join(''));
      const right = ids.get(chars.slice(k).join(''));
      if (left !== undefined && right !== undefined) out.push({ left, right, score: scores[id] ?? 0, id });
    }
  });
  out.sort((a, b) => b.score - a.score || a.id - b.id || a.left - b.left);
  return out.map((m) => `${t.tokens[m.left]} ${t.tokens[m.right]}`);
}

/** MLX affine quantization of rows of `cols` values: codes in a little-endian bit stream per row, scales and biases rounded to F16. */
export function quantizeMlx(
  w: Float32Array,
  q: { bits: number; groupSize: number },
): { packed: Uint32Array; scales: Float32Array; biases: Float32Array; dequantized: Float32Array } {
  const groups = w.length / q.groupSize;
  const top = 2 ** q.bits - 1;
  const packed = new Uint32Array((w.length * q.bits) / 32);
  const scales = new Float32Array(groups);
  const biases = new Float32Array(groups);
  const dequantized = new Float32Array(w.length);
  for (let g = 0; g < groups; g++) {
    const part = w.subarray(g * q.groupSize, (g + 1) * q.groupSize);
    let lo = Infinity;
    let hi = -Infinity;
    for (const x of part) [lo, hi] = [Math.min(lo, x), Math.max(hi, x)];
    const s = f16ToF32(f32ToF16((hi - lo) / top || 1));
    const b = f16ToF32(f32ToF16(lo));
    scales[g] = s;
    biases[g] = b;
    part.forEach((x, j) => {
      const code = Math.max(0, Math.min(top, Math.round((x - b) / s)));
      const i = g * q.groupSize + j;
      packed[Math.floor((i * q.bits) / 32)]! |= code << ((i * q.bits) % 32);
      dequantized[i] = s * code + b;
    });
  }
  return { packed, scales, biases, dequantized };
}

/** The inverse of llama's q/k row permutation (hf-arch permutedRow): HF row of each GGUF row. */
function unpermute(w: Float32Array, cols: number, heads: number): Float32Array {
  const rows = w.length / cols;
  const d = rows / heads;
  const out = new Float32Array(w.length);
  for (let r = 0; r < rows; r++) {
    const rem = r % d;
    const src = r - rem + (rem % 2) * (d / 2) + Math.floor(rem / 2);
    out.set(w.subarray(r * cols, (r + 1) * cols), src * cols);
  }
  return out;
}

interface StTensor {
  name: string;
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

function hfTensors(g: GgufFile, r: TensorRecipe, o: HfExportOptions): StTensor[] {
  const dims = g.tensor(r.gguf).dims;
  const w = g.readTensorF32(r.gguf);
  const cols = dims[0] as number;
  const perPart = w.length / r.parts.length;
  const ggmlType = { F32: GgmlType.F32, F16: GgmlType.F16, BF16: GgmlType.BF16 }[o.dtype];
  return r.parts.flatMap((name, p) => {
    let part = w.subarray(p * perPart, (p + 1) * perPart);
    if (r.permuteHeads) part = unpermute(part, cols, r.permuteHeads);
    const reversed = [...dims].reverse();
    const shape = r.parts.length > 1 ? reversed.slice(1) : reversed;
    if (r.squeeze) shape.unshift(1);
    if (o.mlx && dims.length >= 2) {
      const q = quantizeMlx(part, o.mlx);
      const module = name.slice(0, -'.weight'.length);
      const groupShape = [...shape.slice(0, -1), cols / o.mlx.groupSize];
      return [
        {
          name,
          dtype: 'U32',
          shape: [...shape.slice(0, -1), (cols * o.mlx.bits) / 32],
          data: new Uint8Array(q.packed.buffer),
        },
        { name: `${module}.scales`, dtype: 'F16', shape: groupShape, data: quantize(GgmlType.F16, q.scales) },
        { name: `${module}.biases`, dtype: 'F16', shape: groupShape, data: quantize(GgmlType.F16, q.biases) },
      ];
    }
    return [{ name, dtype: o.dtype, shape, data: quantize(ggmlType, part) }];
  });
}

/** Writes the GGUF model at `gguf` as a model folder in `dir` (created). */
export function writeHfFolder(gguf: string, dir: string, o: HfExportOptions): void {
  const g = GgufFile.open(gguf);
  try {
    mkdirSync(dir, { recursive: true });
    const config = configOf(g);
    if (o.mlx) config.quantization = { group_size: o.mlx.groupSize, bits: o.mlx.bits };
    const tied = config.tie_word_embeddings === true;
    const has = (n: string): boolean =>
      n === 'lm_head.weight' ? !tied : o.mlx !== undefined && n.includes('switch_mlp');
    const recipes = tensorRecipes(g.architecture, parseHfConfig(JSON.stringify(config)), has).filter(
      (r) => !r.values,
    );
    const tensors = recipes.flatMap((r) => hfTensors(g, r, o));
    const shards = o.shards ?? 1;
    const names = Array.from({ length: shards }, (_, i) =>
      shards === 1
        ? 'model.safetensors'
        : `model-${String(i + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`,
    );
    const per = Math.ceil(tensors.length / shards);
    const weightMap: Record<string, string> = {};
    names.forEach((file, i) => {
      const part = tensors.slice(i * per, (i + 1) * per);
      for (const t of part) weightMap[t.name] = file;
      writeFileSync(join(dir, file), encodeSafetensors(part, { format: 'pt' }));
    });
    if (shards > 1)
      writeFileSync(
        join(dir, 'model.safetensors.index.json'),
        JSON.stringify({ metadata: {}, weight_map: weightMap }),
      );
    const tok = tokenizerFiles(tokenizerMetadataFromGguf(g.metadata.entries));
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tok.tokenizer));
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(tok.config, null, 2));
  } finally {
    g.close();
  }
}
