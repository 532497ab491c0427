import { TandemError } from '../../errors/index.js';
import type { ModelShape } from './model-shape.js';

const hf = (repo: string): string => `https://huggingface.co/${repo}/blob/main/config.json`;

function dense(
  id: string,
  name: string,
  repo: string,
  s: Omit<ModelShape, 'id' | 'name' | 'source' | 'moe' | 'mla'>,
): ModelShape {
  return { id, name, source: hf(repo), ...s };
}

const llama8b = { layers: 32, hidden: 4096, heads: 32, kvHeads: 8, headDim: 128, ffn: 14336 };
const llama70b = { layers: 80, hidden: 8192, heads: 64, kvHeads: 8, headDim: 128, ffn: 28672 };
const deepseekAttention = { qLoraRank: 1536, kvLoraRank: 512, ropeDim: 64, nopeDim: 128, vDim: 128 };

/**
 * Widely used models, with the numbers of their config.json (`num_hidden_layers`,
 * `hidden_size`, `num_attention_heads`, `num_key_value_heads`, `head_dim`, `intermediate_size`,
 * `vocab_size`, `tie_word_embeddings`; for mixtures of experts the routed and shared expert
 * counts, `num_experts_per_tok`, `moe_intermediate_size` and `first_k_dense_replace`; for
 * multi-head latent attention `q_lora_rank`, `kv_lora_rank` and the head widths).
 */
export const modelCatalog: readonly ModelShape[] = [
  dense('smollm2-135m', 'SmolLM2 135M', 'HuggingFaceTB/SmolLM2-135M', {
    ...{ layers: 30, hidden: 576, heads: 9, kvHeads: 3, headDim: 64, ffn: 1536 },
    vocab: 49152,
    tiedEmbeddings: true,
  }),
  dense('tinyllama-1.1b', 'TinyLlama 1.1B', 'TinyLlama/TinyLlama-1.1B-Chat-v1.0', {
    ...{ layers: 22, hidden: 2048, heads: 32, kvHeads: 4, headDim: 64, ffn: 5632 },
    vocab: 32000,
    tiedEmbeddings: false,
  }),
  dense('llama-2-7b', 'Llama 2 7B', 'meta-llama/Llama-2-7b-hf', {
    ...{ layers: 32, hidden: 4096, heads: 32, kvHeads: 32, headDim: 128, ffn: 11008 },
    vocab: 32000,
    tiedEmbeddings: false,
  }),
  dense('llama-3.1-8b', 'Llama 3.1 8B', 'meta-llama/Llama-3.1-8B', {
    ...llama8b,
    vocab: 128256,
    tiedEmbeddings: false,
  }),
  dense('llama-3.1-70b', 'Llama 3.1 70B', 'meta-llama/Llama-3.1-70B', {
    ...llama70b,
    vocab: 128256,
    tiedEmbeddings: false,
  }),
  dense('llama-3.3-70b', 'Llama 3.3 70B', 'meta-llama/Llama-3.3-70B-Instruct', {
    ...llama70b,
    vocab: 128256,
    tiedEmbeddings: false,
  }),
  dense('llama-3.1-405b', 'Llama 3.1 405B', 'meta-llama/Llama-3.1-405B', {
    ...{ layers: 126, hidden: 16384, heads: 128, kvHeads: 8, headDim: 128, ffn: 53248 },
    vocab: 128256,
    tiedEmbeddings: false,
  }),
  dense('qwen2.5-32b', 'Qwen2.5 32B', 'Qwen/Qwen2.5-32B-Instruct', {
    ...{ layers: 64, hidden: 5120, heads: 40, kvHeads: 8, headDim: 128, ffn: 27648 },
    vocab: 152064,
    tiedEmbeddings: false,
  }),
  dense('qwen2.5-72b', 'Qwen2.5 72B', 'Qwen/Qwen2.5-72B-Instruct', {
    ...{ layers: 80, hidden: 8192, heads: 64, kvHeads: 8, headDim: 128, ffn: 29568 },
    vocab: 152064,
    tiedEmbeddings: false,
  }),
  dense('qwen3-32b', 'Qwen3 32B', 'Qwen/Qwen3-32B', {
    ...{ layers: 64, hidden: 5120, heads: 64, kvHeads: 8, headDim: 128, ffn: 25600 },
    vocab: 151936,
    tiedEmbeddings: false,
  }),
  {
    id: 'qwen3-30b-a3b',
    name: 'Qwen3 30B-A3B',
    source: hf('Qwen/Qwen3-30B-A3B'),
    ...{ layers: 48, hidden: 2048, heads: 32, kvHeads: 4, headDim: 128, ffn: 6144 },
    vocab: 151936,
    tiedEmbeddings: false,
    moe: { experts: 128, active: 8, shared: 0, expertFfn: 768, denseLayers: 0 },
  },
  {
    id: 'qwen3-235b-a22b',
    name: 'Qwen3 235B-A22B',
    source: hf('Qwen/Qwen3-235B-A22B'),
    ...{ layers: 94, hidden: 4096, heads: 64, kvHeads: 4, headDim: 128, ffn: 12288 },
    vocab: 151936,
    tiedEmbeddings: false,
    moe: { experts: 128, active: 8, shared: 0, expertFfn: 1536, denseLayers: 0 },
  },
  {
    id: 'mixtral-8x7b',
    name: 'Mixtral 8x7B',
    source: hf('mistralai/Mixtral-8x7B-v0.1'),
    ...{ layers: 32, hidden: 4096, heads: 32, kvHeads: 8, headDim: 128, ffn: 14336 },
    vocab: 32000,
    tiedEmbeddings: false,
    moe: { experts: 8, active: 2, shared: 0, expertFfn: 14336, denseLayers: 0 },
  },
  {
    id: 'gpt-oss-20b',
    name: 'gpt-oss 20B',
    source: hf('openai/gpt-oss-20b'),
    ...{ layers: 24, hidden: 2880, heads: 64, kvHeads: 8, headDim: 64, ffn: 2880 },
    vocab: 201088,
    tiedEmbeddings: false,
    moe: { experts: 32, active: 4, shared: 0, expertFfn: 2880, denseLayers: 0 },
  },
  {
    id: 'gpt-oss-120b',
    name: 'gpt-oss 120B',
    source: hf('openai/gpt-oss-120b'),
    ...{ layers: 36, hidden: 2880, heads: 64, kvHeads: 8, headDim: 64, ffn: 2880 },
    vocab: 201088,
    tiedEmbeddings: false,
    moe: { experts: 128, active: 4, shared: 0, expertFfn: 2880, denseLayers: 0 },
  },
  {
    id: 'deepseek-v3',
    name: 'DeepSeek V3 / R1 (671B)',
    source: hf('deepseek-ai/DeepSeek-V3'),
    ...{ layers: 61, hidden: 7168, heads: 128, kvHeads: 128, headDim: 192, ffn: 18432 },
    vocab: 129280,
    tiedEmbeddings: false,
    moe: { experts: 256, active: 8, shared: 1, expertFfn: 2048, denseLayers: 3 },
    mla: deepseekAttention,
  },
  {
    id: 'kimi-k2',
    name: 'Kimi K2 (1T)',
    source: hf('moonshotai/Kimi-K2-Instruct'),
    ...{ layers: 61, hidden: 7168, heads: 64, kvHeads: 64, headDim: 192, ffn: 18432 },
    vocab: 163840,
    tiedEmbeddings: false,
    moe: { experts: 384, active: 8, shared: 1, expertFfn: 2048, denseLayers: 1 },
    mla: deepseekAttention,
  },
];

/** Other names people use for catalog entries. */
const aliases: Record<string, string> = {
  'deepseek-r1': 'deepseek-v3',
  'deepseek-v3.1': 'deepseek-v3',
  'kimi-k2-thinking': 'kimi-k2',
  'llama-3-8b': 'llama-3.1-8b',
  'llama-3-70b': 'llama-3.1-70b',
};

export function findModelShape(name: string): ModelShape {
  const id = name.trim().toLowerCase();
  const found = modelCatalog.find((m) => m.id === (aliases[id] ?? id));
  if (!found)
    throw new TandemError('PAR_UNKNOWN_MODEL', `plan: unknown model '${name}'`, {
      hint: `give a GGUF file, or one of: ${modelCatalog.map((m) => m.id).join(', ')} (tandem plan --list-models)`,
      details: { model: name },
    });
  return found;
}
