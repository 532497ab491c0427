import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { tempModel } from '../../engine/testing/temp-model.js';
import { TandemError } from '../../errors/index.js';
import {
  bytesFromGguf,
  bytesFromShape,
  findEngine,
  findLink,
  findModelShape,
  forecastAuto,
  forecastSplit,
  paramCounts,
  parseForecastMachines,
  parseQuant,
  prefillShapeOf,
  sharedHostMachines,
  validateForecasts,
  validationSummary,
  type Calibration,
  type Forecast,
  type ForecastInput,
} from './index.js';

/** A calibration of one thread of this VM (24 GB, 2 cores, 20 GB/s, 200 GFLOP/s), with `extra` terms. */
const thisCalibration = (extra: Partial<Calibration> = {}): Calibration => ({
  date: '2026-11-29',
  threads: 1,
  memoryBytes: 24e9,
  cpuCores: 2,
  decodeBytesPerS: 20e9,
  prefillFlopsPerS: 200e9,
  layerOverheadMs: 0.1,
  ...extra,
});

/** 'this' as thisCalibration(extra) measured it. */
const thisNode = (extra: Partial<Calibration> = {}): ForecastInput['machines'] =>
  parseForecastMachines('this', thisCalibration(extra));

const moe = tempModel('tandem-forecast-', { arch: 'qwen3moe', shape: 'tiny', type: 'q8_0', seed: 2 });

const billions = (id: string): { total: number; active: number } => {
  const p = paramCounts(findModelShape(id));
  return { total: p.total / 1e9, active: p.active / 1e9 };
};

test('catalog parameter counts match what the models publish (total and active)', () => {
  const published: [string, number, number][] = [
    ['llama-3.1-8b', 8.03, 7.5],
    ['llama-3.1-70b', 70.6, 69.5],
    ['deepseek-v3', 671, 37],
    ['kimi-k2', 1030, 32],
    ['qwen3-235b-a22b', 235, 22],
    ['gpt-oss-120b', 117, 5.1],
    ['mixtral-8x7b', 46.7, 12.9],
  ];
  for (const [id, total, active] of published) {
    const p = billions(id);
    assert.ok(
      Math.abs(p.total / total - 1) < 0.03,
      `${id}: ${p.total.toFixed(1)}B in all, published ${total}B`,
    );
    assert.ok(
      Math.abs(p.active / active - 1) < 0.05,
      `${id}: ${p.active.toFixed(1)}B active, published ${active}B`,
    );
  }
});

test('published cases: median decode error at most 20%, every case within 40% or explained', () => {
  const rows = validateForecasts();
  const decode = validationSummary(rows, 'decode_tok_s');
  assert.ok(decode.cases >= 8, `${decode.cases} decode cases`);
  assert.ok(decode.median <= 0.2, `median |error| ${decode.median}`);
  for (const r of rows.filter((x) => !x.fitted))
    assert.ok(
      Math.abs(r.error) <= 0.4 || r.note,
      `${r.id} ${r.figure}: ${(r.error * 100).toFixed(1)}% with no note`,
    );
});

const input = (
  model: string,
  quant: string,
  machines: string,
  link = 'tb5-rdma',
): Omit<ForecastInput, 'parallel'> => ({
  model: bytesFromShape(findModelShape(model), parseQuant(quant)),
  machines: parseForecastMachines(machines),
  link: findLink(link),
  engine: findEngine('llama.cpp'),
  promptTokens: 512,
  context: 8192,
});

test('fit: 405B at 4 bits does not fit one 16 GB Mac mini, and the shortfall is named per machine', () => {
  const f = forecastSplit({ ...input('llama-3.1-405b', 'q4_k_m', 'mac-mini-m4:16g'), parallel: 'tp' });
  assert.equal(f.fits, false);
  assert.ok(f.per_machine[0]!.headroom_bytes < -200e9, `headroom ${f.per_machine[0]!.headroom_bytes}`);
  const big = forecastAuto(input('llama-3.1-405b', 'q4_k_m', '2x mac-studio-m3-ultra:512g')).best;
  assert.equal(big.fits, true);
});

test('pipeline: layers follow each stage speed, and the stages cover every layer once', () => {
  const f = forecastSplit({
    ...input('llama-3.3-70b', 'q4_k_m', 'mac-studio-m3-ultra:256g, mac-mini-m4-pro:64g'),
    parallel: 'pp',
  });
  const [a, b] = f.placement;
  assert.equal(a!.layers[0], 0);
  assert.equal(a!.layers[1], b!.layers[0]);
  assert.equal(b!.layers[1], 80);
  assert.ok(a!.layers[1] - a!.layers[0] > b!.layers[1] - b!.layers[0], 'the faster Ultra takes more layers');
});

test('tensor parallel over TCP is bound by link latency; over RDMA it beats one machine', () => {
  const one = forecastSplit({
    ...input('llama-3.3-70b', 'q8_0', 'mac-studio-m3-ultra:256g'),
    parallel: 'tp',
  });
  const rdma = forecastSplit({
    ...input('llama-3.3-70b', 'q8_0', '4x mac-studio-m3-ultra:256g'),
    parallel: 'tp',
  });
  const tcp = forecastSplit({
    ...input('llama-3.3-70b', 'q8_0', '4x mac-studio-m3-ultra:256g', 'tb5-tcp'),
    parallel: 'tp',
  });
  assert.ok(rdma.decode_tok_s > one.decode_tok_s, `${rdma.decode_tok_s} vs ${one.decode_tok_s}`);
  assert.equal(tcp.bottleneck, 'link latency');
  assert.ok(tcp.decode_tok_s < rdma.decode_tok_s);
});

test('auto keeps the fastest split that fits, and lists every split it tried', () => {
  const r = forecastAuto(input('qwen3-235b-a22b', 'q4_k_m', '4x mac-studio-m3-ultra:256g'));
  assert.deepEqual(r.all.map((f) => f.parallel).sort(), ['ep', 'hybrid', 'pp', 'tp']);
  for (const f of r.all) if (f.fits) assert.ok(f.decode_tok_s <= r.best.decode_tok_s);
});

test('a GGUF header gives the bytes the file holds, experts counted at their active share', () => {
  const m = bytesFromGguf(moe());
  const stored = m.layers.reduce((a, l) => a + l.total, 0) + m.embedding + m.head;
  assert.ok(
    stored <= statSync(moe()).size && stored > 0.9 * statSync(moe()).size,
    `${stored} of ${statSync(moe()).size}`,
  );
  assert.ok(m.moe && m.moe.active < m.moe.experts);
  for (const l of m.layers) assert.ok(l.active < l.total && l.expert > 0);
});

test('bad names are typed errors that say what to use', () => {
  const code = (f: () => unknown): string | undefined => {
    try {
      f();
    } catch (e) {
      return e instanceof TandemError ? e.code : 'untyped';
    }
    return undefined;
  };
  assert.equal(
    code(() => findModelShape('llama-9')),
    'PAR_UNKNOWN_MODEL',
  );
  assert.equal(
    code(() => parseQuant('q3')),
    'PAR_UNKNOWN_QUANT',
  );
  assert.equal(
    code(() => findLink('carrier-pigeon')),
    'PAR_UNKNOWN_LINK',
  );
  assert.equal(
    code(() => findEngine('vllm')),
    'PAR_UNKNOWN_ENGINE',
  );
  assert.equal(
    code(() => parseForecastMachines('2x mac-mini-m4:64g')),
    'TOPOLOGY_UNKNOWN_MACHINE',
  );
  assert.equal(
    code(() => parseForecastMachines('this')),
    'PAR_NOT_CALIBRATED',
  );
  assert.equal(
    code(() => parseForecastMachines('65x mac-mini-m4')),
    'TOPOLOGY_UNKNOWN_MACHINE',
  );
});

test("a calibrated node's fixed costs: the step's once a token, the prefill's per layer and prompt token", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const machine = (step: number, prefill: number): ForecastInput['machines'] =>
    thisNode({ stepOverheadMs: step, prefillLayerTokenMs: prefill });
  const run = (step: number, prefill: number) =>
    forecastSplit({
      model,
      machines: machine(step, prefill),
      link: findLink('10gbe'),
      engine: findEngine('tandem-cpu'),
      parallel: 'tp',
      promptTokens: 128,
      context: 192,
    });
  const base = run(0, 0);
  const withCosts = run(2, 0.01);
  assert.ok(Math.abs(1000 / withCosts.decode_tok_s - 1000 / base.decode_tok_s - 2) < 1e-9);
  assert.ok(Math.abs(withCosts.ttft_ms - base.ttft_ms - model.layers.length * 128 * 0.01) < 1e-9);
});

test("a calibrated node's decode reads: the layers at their share of the stream rate, the head at the full rate", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const read = (decodeLayerShare?: number): number =>
    forecastSplit({
      model,
      machines: thisNode(decodeLayerShare === undefined ? {} : { decodeLayerShare }),
      link: findLink('10gbe'),
      engine: findEngine('tandem-cpu'),
      parallel: 'tp',
      promptTokens: 128,
      context: 160,
    }).terms.read_ms;
  const head = model.head > 0 ? model.head : model.embedding;
  const layers = model.layers.reduce((a, l) => a + l.active, 0);
  assert.ok(Math.abs(read() - ((layers + head) / 20e9) * 1000) < 1e-9);
  assert.ok(Math.abs(read(0.8) - (layers / (0.8 * 20e9) + head / 20e9) * 1000) < 1e-9);
});

test("per step on the link: tandem's tensor parallel gathers the logits, a pipeline broadcasts the token", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const link = { id: 'l', name: 'l', latencyUs: 100, bandwidthGBs: 1, source: 'test' };
  const input = (parallel: 'tp' | 'pp', engine: string): ForecastInput => ({
    model,
    machines: parseForecastMachines('2x mac-mini-m4-pro'),
    link,
    engine: findEngine(engine),
    parallel,
    promptTokens: 16,
    context: 64,
  });
  const tandem = forecastSplit(input('tp', 'tandem-cpu')).terms;
  const mlx = forecastSplit(input('tp', 'mlx')).terms;
  // 2 all-reduces a layer, one latency step each at 2 ranks, plus the gather's one step for tandem
  assert.ok(Math.abs(mlx.link_latency_ms - 2 * model.layers.length * 0.1) < 1e-9);
  assert.ok(Math.abs(tandem.link_latency_ms - mlx.link_latency_ms - 0.1) < 1e-9);
  const gatherBytes = (model.vocab * 4) / 2;
  assert.ok(Math.abs(tandem.link_bytes_ms - mlx.link_bytes_ms - (gatherBytes / 1e9) * 1000) < 1e-9);
  // a pipeline of 2: one hand-off and one broadcast of the token, a latency step each
  assert.ok(Math.abs(forecastSplit(input('pp', 'tandem-cpu')).terms.link_latency_ms - 0.2) < 1e-9);
});

test("a calibrated machine's wake-up: each pipeline hand-off and the token's broadcast wake a stage that slept, each tensor-parallel exchange waits for one", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const link = { id: 'l', name: 'l', latencyUs: 100, bandwidthGBs: 1, source: 'test' };
  const calibration = (wakeMs: number): Calibration => thisCalibration({ wakeMs });
  const linkLatency = (machines: ForecastInput['machines'], parallel: 'tp' | 'pp'): number =>
    forecastSplit({
      model,
      machines,
      link,
      engine: findEngine('tandem-cpu'),
      parallel,
      promptTokens: 16,
      context: 64,
    }).terms.link_latency_ms;
  const latency = (parallel: 'tp' | 'pp', wakeMs: number): number =>
    linkLatency(parseForecastMachines('3x this', calibration(wakeMs)), parallel);
  // 3 stages: 2 hand-offs and a broadcast wake a sleeper
  assert.ok(Math.abs(latency('pp', 5) - latency('pp', 0) - 3 * 5) < 1e-9);
  // tensor parallel: each of a layer's 2 all-reduces and the logits' gather waits for a peer
  // that may have lost its core
  assert.ok(Math.abs(latency('tp', 5) - latency('tp', 0) - (2 * model.layers.length + 1) * 5) < 1e-9);
  // nodes sharing a host with a measured exchange pay it on each exchange instead, and the
  // wake-up only where a pipeline hands off
  const shared = (parallel: 'tp' | 'pp', exchangeMs: number): number =>
    linkLatency(
      sharedHostMachines({
        nodes: 3,
        perNode: calibration(5),
        together: calibration(5),
        cores: 4,
        concurrent: parallel === 'tp',
        exchangeMs,
      }),
      parallel,
    );
  assert.ok(Math.abs(shared('tp', 0.5) - latency('tp', 0) - (2 * model.layers.length + 1) * 0.5) < 1e-9);
  assert.ok(Math.abs(shared('pp', 0.5) - latency('pp', 5)) < 1e-9);
});

test("nodes sharing a host: a prefill's exchanges pay the exchange measured after a prefill's chunk, a decode step's the decode one", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const at = (prefillExchangeMs?: number): Forecast =>
    forecastSplit({
      model,
      machines: sharedHostMachines({
        nodes: 3,
        perNode: thisCalibration({ wakeMs: 5 }),
        together: thisCalibration({ wakeMs: 5 }),
        cores: 2,
        concurrent: true,
        exchangeMs: 0.5,
        ...(prefillExchangeMs !== undefined ? { prefillExchangeMs } : {}),
      }),
      link: { id: 'l', name: 'l', latencyUs: 100, bandwidthGBs: 1, source: 'test' },
      engine: findEngine('tandem-cpu'),
      parallel: 'tp',
      promptTokens: 128,
      context: 192,
    });
  // a layer's 2 all-reduces; the logits' gather follows the one-token head, as in a decode step
  const exchanges = 2 * model.layers.length;
  const [plain, measured] = [at(), at(4)];
  assert.equal(measured.terms.link_latency_ms, plain.terms.link_latency_ms, 'the decode step is unchanged');
  assert.ok(
    Math.abs(measured.ttft_ms - plain.ttft_ms - exchanges * (4 - 0.5)) < 1e-6,
    'each prefill exchange pays 4 ms',
  );
});

test("a node calibrated with the prefill probe: the layers' GEMMs, attention at its own rate, the head's last token, the per-token cost at the model's width", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const probed = (attention: number, width: number): Forecast =>
    forecastSplit({
      model,
      machines: thisNode({
        prefillFlopsPerS: 100e9,
        prefillAttentionFlopsPerS: attention,
        prefillShape: { hidden: width, heads: 32, kvHeads: 4, headDim: 64, ff: 5632, tokens: 128 },
        prefillLayerTokenMs: 0.01,
      }),
      link: findLink('10gbe'),
      engine: findEngine('tandem-cpu'),
      parallel: 'tp',
      promptTokens: 128,
      context: 192,
    });
  const L = model.layers.length;
  const gemmMs = ((2 * (model.activeParams - model.vocab * model.hidden) * 128) / 100e9) * 1000;
  const attentionMs = ((2 * L * model.heads * model.headDim * 128 * 128) / 10e9) * 1000;
  const headMs = (model.head / 20e9) * 1000;
  const at = probed(10e9, model.hidden);
  assert.ok(Math.abs(at.ttft_ms - (gemmMs + attentionMs + L * 128 * 0.01 + headMs)) < 1e-9);
  // attention twice as fast halves its term only; a probe at half the width doubles the per-token cost
  assert.ok(Math.abs(at.ttft_ms - probed(20e9, model.hidden).ttft_ms - attentionMs / 2) < 1e-9);
  assert.ok(Math.abs(probed(10e9, model.hidden / 2).ttft_ms - at.ttft_ms - L * 128 * 0.01) < 1e-9);
});

test('the prefill probe stands for a model with its own layer: width, heads, KV heads, feed-forward', () => {
  const shape = prefillShapeOf(bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0'), 128);
  assert.deepEqual(shape, { hidden: 2048, heads: 32, kvHeads: 4, headDim: 64, ff: 5632, tokens: 128 });
  const llama = prefillShapeOf(bytesFromShape(findModelShape('llama-3.1-8b'), 'q4_k_m'), 512);
  assert.deepEqual(llama, { hidden: 4096, heads: 32, kvHeads: 8, headDim: 128, ff: 14336, tokens: 512 });
});

test("tandem's pipeline prefill: its micro-batches overlap the stages, an engine without them takes the prompt stage by stage", () => {
  const model = bytesFromShape(findModelShape('tinyllama-1.1b'), 'q8_0');
  const prefillMs = (pipelines: boolean): number =>
    forecastSplit({
      model,
      machines: parseForecastMachines('2x this', thisCalibration({ wakeMs: 0 })),
      link: { id: 'l', name: 'l', latencyUs: 0, bandwidthGBs: 1e9, source: 'test' },
      engine: { ...findEngine('tandem-cpu'), pipelinesPrefill: pipelines },
      parallel: 'pp',
      promptTokens: 128,
      context: 192,
    }).ttft_ms;
  const [turns, overlapped] = [prefillMs(false), prefillMs(true)];
  // 2 stages of nearly equal time S / 2 and 4 pieces of 32 tokens: (S + 3 S / 2) / 4 = 0.625 S
  assert.ok(
    overlapped > 0.6 * turns && overlapped < 0.7 * turns,
    `${overlapped} ms against ${turns} ms in turns`,
  );
  assert.equal(findEngine('tandem-cpu').pipelinesPrefill, true);
  assert.ok(!findEngine('llama.cpp').pipelinesPrefill);
});
