import type { EngineId } from './engines.js';
import type { ForecastParallel } from './predict.js';
import type { QuantName } from './quant.js';

/** A published measurement the forecast is checked against (docs/plan.md shows the table). */
export interface PublishedCase {
  id: string;
  source: string;
  model: string;
  quant: QuantName;
  machines: string;
  link: string;
  engine: EngineId;
  parallel: ForecastParallel;
  promptTokens: number;
  measured: { decode_tok_s?: number; prefill_tok_s?: number };
  /** Used to fit the engine's numbers: shown, not counted in the error. */
  fitted?: boolean;
  /** What is uncertain about the case, or why the forecast misses it. */
  note?: string;
}

const llamaCppApple =
  'https://github.com/ggml-org/llama.cpp/discussions/4167 (Llama 2 7B Q4_0, tg128 / pp512)';
const geerling = 'https://www.jeffgeerling.com/blog/2025/15-tb-vram-on-mac-studio-rdma-over-thunderbolt-5';
const stabilise = 'Stabilise.io, as reported by aiexpert.news ("The $10k sovereign AI cluster", 2026)';
const ultraNote =
  'Ultra chips are two dies joined by UltraFusion; single-stream decode on them reaches a smaller share of the paper bandwidth than on one die (the model has one share for all)';

function apple(
  id: string,
  machines: string,
  decode: number,
  prefill?: number,
  extra: Partial<PublishedCase> = {},
): PublishedCase {
  return {
    id,
    source: llamaCppApple,
    model: 'llama-2-7b',
    quant: 'q4_0',
    machines,
    link: '10gbe',
    engine: 'llama.cpp',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: decode, ...(prefill !== undefined ? { prefill_tok_s: prefill } : {}) },
    ...extra,
  };
}

export const publishedCases: readonly PublishedCase[] = [
  apple('m1-max', 'macbook-pro-m1-max:32g', 61.19),
  apple('m2-max', 'macbook-pro-m2-max:32g', 65.95),
  apple('m1-ultra', 'mac-studio-m1-ultra:64g', 83.73, 1030, { note: ultraNote }),
  apple('m2-ultra', 'mac-studio-m2-ultra:64g', 94.27, 1238, { note: ultraNote }),
  apple('m3-ultra', 'mac-studio-m3-ultra:96g', 92.1, 1471, { note: ultraNote }),
  apple('m4-pro', 'mac-mini-m4-pro:24g', 50.7, 440, { fitted: true }),
  apple('m4-max', 'macbook-pro-m4-max:48g', 83.1, 886, { fitted: true }),
  {
    id: 'm4-llama3',
    source:
      'https://github.com/brand-o/normiebench/issues/3 (Mac mini M4 16 GB, llama.cpp Metal, tg128 / pp512)',
    model: 'llama-3.1-8b',
    quant: 'q4_k_m',
    machines: 'mac-mini-m4:16g',
    link: '10gbe',
    engine: 'llama.cpp',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: 20.87, prefill_tok_s: 224.81 },
  },
  {
    id: 'kimi-k2-4x-m3-ultra',
    source: `${geerling} ("around 30 tokens per second", Kimi K2 Thinking, exo 1.0 over RDMA)`,
    model: 'kimi-k2',
    quant: 'int4',
    machines: '2x mac-studio-m3-ultra:512g, 2x mac-studio-m3-ultra:256g',
    link: 'tb5-rdma',
    engine: 'mlx',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: 30 },
    note: 'the figure is given as "around 30"; Kimi K2 Thinking ships as int4',
  },
  {
    id: 'qwen3-235b-4x-m3-ultra',
    source: `${geerling} ("32 tokens per second on the full cluster", Qwen3 235B, exo over RDMA)`,
    model: 'qwen3-235b-a22b',
    quant: 'mlx-4bit',
    machines: '2x mac-studio-m3-ultra:512g, 2x mac-studio-m3-ultra:256g',
    link: 'tb5-rdma',
    engine: 'mlx',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: 32 },
    note: 'the text does not give the quantization; 4-bit (the common mlx-community build) is assumed',
  },
  {
    id: 'deepseek-v3-4x-m3-ultra',
    source: `${stabilise}: DeepSeek V3.1 671B at about 25 tok/s on 4 Mac Studio M3 Ultra 512 GB`,
    model: 'deepseek-v3',
    quant: 'mlx-8bit',
    machines: '4x mac-studio-m3-ultra:512g',
    link: 'tb5-rdma',
    engine: 'mlx',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: 25 },
    note: 'second-hand report; quantization not given (8-bit assumed: it fits and is what a 2 TB cluster would run)',
  },
  {
    id: 'kimi-k2-4x-m3-ultra-stabilise',
    source: `${stabilise}: Kimi K2 1T at about 34 tok/s on 4 Mac Studio M3 Ultra 512 GB`,
    model: 'kimi-k2',
    quant: 'int4',
    machines: '4x mac-studio-m3-ultra:512g',
    link: 'tb5-rdma',
    engine: 'mlx',
    parallel: 'tp',
    promptTokens: 512,
    measured: { decode_tok_s: 34 },
    note: 'second-hand report; int4 assumed (how Kimi K2 ships)',
  },
];
