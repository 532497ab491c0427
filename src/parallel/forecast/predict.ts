import { groupPieces } from '../../engine/model/leaves.js';
import type { EngineModel } from './engines.js';
import type { LinkSpec } from './links.js';
import type { MachineSpec, MemoryConfig } from './machine-catalog.js';
import type { ModelBytes } from './model-bytes.js';
import { microBatches } from '../micro-batches.js';

/**
 * A machine's rates under an engine: weight bytes a second in decode, FLOP/s in prefill, ms a
 * layer costs per token beyond its weights; for a calibrated machine also ms a token costs
 * beyond its layers and ms per layer per prompt token beyond the prefill's FLOPs (0 where
 * unmeasured: the catalog's engines fold them into the per-layer cost).
 */
export interface ForecastRates {
  decodeBytesPerS: number;
  prefillFlopsPerS: number;
  layerOverheadMs: number;
  stepOverheadMs?: number;
  /**
   * A calibrated machine: the share of `decodeBytesPerS` the layers' weights stream at, at the
   * model's own shapes (narrow matvecs and each call's hand-off cost more than the stream
   * probe's wide ones); the head streams at the full rate. 1 elsewhere.
   */
  decodeLayerShare?: number;
  prefillLayerTokenMs?: number;
  /** ms from waking a process that slept to its running (a calibrated machine; 0 elsewhere). */
  wakeMs?: number;
  /**
   * Nodes sharing one host: ms one tensor-parallel exchange costs beyond the link, the wait
   * for the latest rank and the wake-up of one that slept (measured by ranks that compute and
   * meet as the nodes do); where absent, each exchange pays a full `wakeMs`.
   */
  exchangeMs?: number;
  /**
   * The same during a prefill, where a rank computes its share of a whole prompt between two
   * exchanges: on a host with more ranks than cores the latest rank then arrives later (it
   * was preempted for longer); where absent, `exchangeMs`.
   */
  prefillExchangeMs?: number;
  /**
   * A machine calibrated with the prefill probe: causal attention's FLOP/s (attention then is
   * not charged at `prefillFlopsPerS`, which is the GEMMs' rate), and the width the probe's
   * per-token cost was measured at (it scales with the model's).
   */
  prefillAttentionFlopsPerS?: number;
  prefillWidth?: number;
}

/** A machine of the planned cluster; `rates` replaces the catalog's peaks x engine shares (a calibrated machine). */
export interface ForecastMachine {
  name: string;
  spec: MachineSpec;
  memory: MemoryConfig;
  rates?: ForecastRates;
}

export type ForecastParallel = 'tp' | 'pp' | 'ep' | 'hybrid';

export interface ForecastInput {
  model: ModelBytes;
  machines: readonly ForecastMachine[];
  link: LinkSpec;
  engine: EngineModel;
  parallel: ForecastParallel;
  promptTokens: number;
  context: number;
  /** Bytes an activation value takes on the wire (default 2: f16/bf16; 4 for an f32 wire). */
  wireBytes?: number;
}

/** One rank's share: layers [start, end), the fraction of each layer's tensors (tp), of the experts (ep). */
export interface RankShare {
  machine: string;
  layers: [number, number];
  tensorShare: number;
  expertShare: number;
}

export interface MachineForecast {
  name: string;
  id: string;
  device: 'cpu' | 'gpu';
  memory_bytes: number;
  usable_bytes: number;
  weights_bytes: number;
  kv_bytes: number;
  activation_bytes: number;
  headroom_bytes: number;
  fits: boolean;
  /** Decode per token on this machine: weight reads and fixed per-layer costs, ms. */
  read_ms: number;
  overhead_ms: number;
}

export interface Forecast {
  parallel: ForecastParallel;
  fits: boolean;
  placement: RankShare[];
  decode_tok_s: number;
  prefill_tok_s: number;
  ttft_ms: number;
  bottleneck: 'memory bandwidth' | 'engine overhead' | 'link latency' | 'link bandwidth' | 'compute';
  /** Decode step terms, ms: the slowest rank's reads and overheads (summed over stages), the link's share. */
  terms: { read_ms: number; overhead_ms: number; link_latency_ms: number; link_bytes_ms: number };
  per_machine: MachineForecast[];
}

const GB = 1e9;
/** Bytes an activation crossing a link carries per value by default (f16/bf16, as the engines send them). */
const WIRE_BYTES = 2;
/** Bytes a logit takes in tensor parallel's all-gather of the vocabulary (f32). */
const LOGIT_BYTES = 4;
/** Runtime memory besides weights and cache: buffers, logits, the process itself. */
const RUNTIME_BYTES = 0.5 * GB;

function device(m: ForecastMachine, e: EngineModel): 'cpu' | 'gpu' {
  return m.rates ? 'cpu' : e.device(m.spec);
}

/** Bytes a machine can give the model: ~75% of RAM for a Mac's GPU (macOS's default wired limit), RAM less 4 GB for the OS else. */
function usableBytes(m: ForecastMachine, e: EngineModel): number {
  const ram = m.memory.gb * GB;
  return device(m, e) === 'gpu' && m.spec.kind === 'apple' ? 0.75 * ram : Math.max(0, ram - 4 * GB);
}

/** The machine's rates under this engine: weight bytes a second in decode, FLOP/s in prefill, ms a layer. */
export function machineRates(m: ForecastMachine, e: EngineModel): ForecastRates {
  if (m.rates) return m.rates;
  const d = device(m, e);
  const bw = m.memory.bandwidthGBs * GB * (d === 'cpu' ? m.spec.cpuBandwidthShare : 1);
  const peak = d === 'gpu' ? (m.spec.gpuTflops ?? 0) * 1e12 : m.spec.cpuGflops * 1e9;
  return {
    decodeBytesPerS: bw * e.decodeEfficiency[d],
    prefillFlopsPerS: peak * e.prefillEfficiency[d],
    layerOverheadMs: e.layerOverheadMs[d],
  };
}

/**
 * Latency steps of an all-reduce over n ranks and the bytes each rank sends: recursive
 * doubling's log2 n steps and 2 (n - 1) / n of the bytes; with `direct` (EngineModel
 * .exchangesDirect) one step and n - 1 whole parts.
 */
export function allReduceMs(
  n: number,
  bytes: number,
  link: LinkSpec,
  direct = false,
): { latency: number; wire: number } {
  if (n <= 1) return { latency: 0, wire: 0 };
  return {
    latency: ((direct ? 1 : Math.ceil(Math.log2(n))) * link.latencyUs) / 1000,
    wire: (direct ? n - 1 : (2 * (n - 1)) / n) * (bytes / (link.bandwidthGBs * GB)) * 1000,
  };
}

/** Expected busiest rank's share of a token's routed experts, k experts over n ranks (normal approximation of the max). */
export function busiestExpertShare(k: number, n: number): number {
  if (n <= 1) return 1;
  const mean = k / n;
  return Math.min(k, mean + Math.sqrt(2 * mean * Math.log(n))) / k;
}

/** Layers per stage, proportional to each stage's decode rate. */
function stageLayers(layers: number, rates: readonly number[]): [number, number][] {
  const sum = rates.reduce((a, b) => a + b, 0);
  const counts = rates.map((r) => Math.max(1, Math.round((layers * r) / sum)));
  let excess = counts.reduce((a, b) => a + b, 0) - layers;
  for (let i = counts.length - 1; excess !== 0 && i >= 0; i = i === 0 ? counts.length - 1 : i - 1) {
    if (excess > 0 && counts[i]! > 1) {
      counts[i]!--;
      excess--;
    } else if (excess < 0) {
      counts[i]!++;
      excess++;
    }
  }
  let at = 0;
  return counts.map((c) => [at, (at += c)]);
}

/** Each rank's share of the model for the kind (hybrid: tensor-parallel pairs, pipelined). */
export function shares(input: ForecastInput): RankShare[] {
  const { machines, model, parallel } = input;
  const n = machines.length;
  const L = model.layers.length;
  const rate = (m: ForecastMachine): number => machineRates(m, input.engine).decodeBytesPerS;
  if (parallel === 'tp' || parallel === 'ep' || n === 1)
    return machines.map((m) => ({
      machine: m.name,
      layers: [0, L],
      tensorShare: parallel === 'tp' ? 1 / n : 1,
      expertShare: parallel === 'ep' ? 1 / n : 1,
    }));
  const group = parallel === 'hybrid' ? 2 : 1;
  const groups = Array.from({ length: n / group }, (_, g) => machines.slice(g * group, (g + 1) * group));
  const ranges = stageLayers(
    L,
    groups.map((g) => Math.min(...g.map(rate)) * g.length),
  );
  return groups.flatMap((g, s) =>
    g.map((m) => ({ machine: m.name, layers: ranges[s]!, tensorShare: 1 / group, expertShare: 1 })),
  );
}

interface RankCost {
  weights: number;
  kv: number;
  /** Bytes a decode step reads: of the layers, and of the head (the last stage only). */
  read: number;
  headRead: number;
  layerCount: number;
  flopShare: number;
}

/** What one rank holds and reads per token (see the file's header for the model of each kind). */
function rankCost(input: ForecastInput, s: RankShare, last: boolean, first: boolean): RankCost {
  const { model } = input;
  const L = model.layers.length;
  const n = input.machines.length;
  const ep = input.parallel === 'ep' && n > 1;
  const moe = model.moe;
  const busiest = moe && ep ? busiestExpertShare(moe.active, n) : 1;
  let weights = 0;
  let read = 0;
  for (let i = s.layers[0]; i < s.layers[1]; i++) {
    const l = model.layers[i]!;
    const routedTotal = moe ? l.expert * moe.experts : 0;
    const routedActive = moe ? l.expert * moe.active : 0;
    weights += (l.total - routedTotal + routedTotal * s.expertShare) * s.tensorShare;
    read += (l.active - routedActive + routedActive * busiest) * s.tensorShare;
  }
  const headBytes = model.head > 0 ? model.head : model.embedding;
  if (first || s.tensorShare < 1) weights += model.embedding;
  const headRead = last ? headBytes * s.tensorShare : 0;
  if (last) weights += model.head * s.tensorShare;
  const layerCount = s.layers[1] - s.layers[0];
  return {
    weights,
    kv: model.kvBytesPerPosition * (layerCount / L) * input.context * s.tensorShare,
    read,
    headRead,
    layerCount,
    flopShare: (layerCount / L) * s.tensorShare * (ep ? 1 / n : 1),
  };
}

/** A rank's decode reads, ms: its layers' bytes at the layers' share of the stream rate, the head's at the full rate. */
function readMs(c: RankCost, r: ForecastRates): number {
  return (c.read / (r.decodeBytesPerS * (r.decodeLayerShare ?? 1)) + c.headRead / r.decodeBytesPerS) * 1000;
}

/** Stages in order, each the ranks that work at once. */
function stagesOf(input: ForecastInput, placement: readonly RankShare[]): number[][] {
  const stages: number[][] = [];
  placement.forEach((s, r) => {
    const prev = stages[stages.length - 1];
    if (prev && placement[prev[0]!]!.layers[0] === s.layers[0]) prev.push(r);
    else stages.push([r]);
  });
  return stages;
}

interface LinkTime {
  latency: number;
  wire: number;
}

/**
 * The decode step's and the prefill's time on the link, ms. Per layer: tensor parallel's 2
 * all-reduces of the activations in each stage of more than one rank; expert parallel's
 * attention all-reduce and, a MoE layer, the experts' outputs' all-gather (and a prefill's
 * routing gather). Per step: one hand-off per stage boundary; tensor parallel's
 * all-gather of the logits where the engine splits the head by vocabulary; a pipeline's
 * broadcast of the picked token from the last stage to every rank.
 */
function linkTimes(
  input: ForecastInput,
  stages: readonly number[][],
  costs: readonly RankCost[],
): { step: LinkTime; prefillMs: number } {
  const { model, link } = input;
  const wireBytes = input.wireBytes ?? WIRE_BYTES;
  const T = input.promptTokens;
  const n = input.machines.length;
  const group = stages[0]!.length;
  const step: LinkTime = { latency: 0, wire: 0 };
  let prefillMs = 0;
  // a calibrated machine's wake-up: what a hand-off costs when the rank it wakes slept
  const wake = Math.max(...input.machines.map((m) => m.rates?.wakeMs ?? 0));
  const woken = { latency: wake, wire: 0 };
  const exchange = Math.max(...input.machines.map((m) => m.rates?.exchangeMs ?? m.rates?.wakeMs ?? 0));
  const met = { latency: exchange, wire: 0 };
  const prefillExchange = Math.max(
    ...input.machines.map((m) => m.rates?.prefillExchangeMs ?? m.rates?.exchangeMs ?? m.rates?.wakeMs ?? 0),
  );
  const metInPrefill = { latency: prefillExchange, wire: 0 };
  const add = (times: number, s: LinkTime, pre?: LinkTime): void => {
    step.latency += times * s.latency;
    step.wire += times * s.wire;
    if (pre) prefillMs += times * (pre.latency + pre.wire);
  };
  // the parts each rank sends per exchange (the heads' split stands for the FFN's too)
  const pieces = input.engine.sumsExactly ? groupPieces(model.heads, group) : 1;
  if (input.parallel !== 'ep' && group > 1) {
    const layers = stages.reduce((a, st) => a + costs[st[0]!]!.layerCount, 0);
    const direct = input.engine.exchangesDirect === true;
    add(
      2 * layers,
      allReduceMs(group, pieces * model.hidden * wireBytes, link, direct),
      allReduceMs(group, pieces * T * model.hidden * wireBytes, link, direct),
    );
    // a rank that reaches an all-reduce first spins at most the fabric's window (200 us) and
    // then sleeps; a peer preempted mid-layer arrives late, and the sleeper wakes. Measured
    // as such on nodes sharing a host (exchangeMs, prefillExchangeMs); elsewhere a full wake-up each
    add(2 * layers, met, metInPrefill);
    // an all-gather moves (n-1)/n of the logits in as many latency steps as an all-reduce;
    // only the last stage's group computes logits
    const gather = allReduceMs(group, model.vocab * LOGIT_BYTES, link);
    const half = { latency: gather.latency, wire: gather.wire / 2 };
    if (input.engine.shardsHead) {
      add(1, half, half);
      add(1, met, met);
    }
  }
  if (input.parallel === 'ep' && group > 1) {
    // attention is split as tensor parallel splits it: its all-reduce, and the wait at it
    const layers = costs[stages[0]![0]!]!.layerCount;
    const direct = input.engine.exchangesDirect === true;
    add(
      layers,
      allReduceMs(group, pieces * model.hidden * wireBytes, link, direct),
      allReduceMs(group, pieces * T * model.hidden * wireBytes, link, direct),
    );
    add(layers, met, metInPrefill);
    if (model.moe) {
      // a MoE layer gathers the experts' outputs (f32, k rows a token) to every rank; a
      // prefill's routing travels in a gather before it, a decode step routes on every rank
      const moeLayers = model.layers.filter((l) => l.expert > 0).length;
      const perToken = model.moe.active * model.hidden * 4;
      const gather = (bytes: number): LinkTime => {
        const r = allReduceMs(group, bytes, link);
        return { latency: r.latency, wire: r.wire / 2 };
      };
      add(moeLayers, gather(perToken), gather(T * perToken));
      add(moeLayers, met, metInPrefill);
      prefillMs += moeLayers * (gather(0).latency + prefillExchange);
    }
  }
  const handOffs = stages.length - 1;
  const bytesMs = (bytes: number): number => (bytes / (link.bandwidthGBs * GB)) * 1000;
  add(
    handOffs,
    { latency: link.latencyUs / 1000, wire: bytesMs(model.hidden * wireBytes) },
    { latency: link.latencyUs / 1000, wire: bytesMs(T * model.hidden * wireBytes) },
  );
  if (handOffs > 0) add(1, { latency: (Math.ceil(Math.log2(n)) * link.latencyUs) / 1000, wire: 0 });
  // stages take turns, so each hand-off and the token's broadcast wake a stage that slept
  if (handOffs > 0) add(handOffs + 1, woken, woken);
  return { step, prefillMs };
}

/**
 * One rank's prefill of the prompt, ms. Peak-based (the catalog's engines): 2 x active
 * parameters x T plus attention's 2 L H d T^2 at the prefill FLOP/s. Probe-based (a machine
 * calibrated with the prefill probe): the layers' GEMMs at the probe's GEMM rate, attention at
 * its own rate, and only the last token through the head (a matvec: its bytes at the decode
 * rate). Either way, on a calibrated machine, the per-token fixed cost of each layer
 * (prefillLayerTokenMs, at the probe's width, scaled to the model's), shared as attention's
 * heads split.
 */
function rankPrefillMs(
  input: ForecastInput,
  rate: ForecastRates,
  cost: RankCost,
  share: RankShare,
  last: boolean,
): number {
  const { model } = input;
  const T = input.promptTokens;
  const attention = 2 * model.layers.length * model.heads * model.headDim * T * T;
  const widthScale = rate.prefillWidth ? model.hidden / rate.prefillWidth : 1;
  const fixedMs = cost.layerCount * share.tensorShare * T * (rate.prefillLayerTokenMs ?? 0) * widthScale;
  if (rate.prefillAttentionFlopsPerS === undefined) {
    const flops = 2 * model.activeParams * T + attention;
    return ((flops * cost.flopShare) / rate.prefillFlopsPerS) * 1000 + fixedMs;
  }
  const gemm = 2 * (model.activeParams - model.vocab * model.hidden) * T;
  const headBytes = model.head > 0 ? model.head : model.embedding;
  const headMs = last ? ((headBytes * share.tensorShare) / rate.decodeBytesPerS) * 1000 : 0;
  return (
    ((gemm * cost.flopShare) / rate.prefillFlopsPerS) * 1000 +
    ((attention * cost.flopShare) / rate.prefillAttentionFlopsPerS) * 1000 +
    fixedMs +
    headMs
  );
}

/** The forecast of one split on these machines. */
export function forecastSplit(input: ForecastInput): Forecast {
  const { model, machines, engine } = input;
  const placement = shares(input);
  const stages = stagesOf(input, placement);
  const costs = placement.map((s, r) =>
    rankCost(input, s, stages[stages.length - 1]!.includes(r), stages[0]!.includes(r)),
  );
  const rates = machines.map((m) => machineRates(m, engine));
  const T = input.promptTokens;
  const activation = RUNTIME_BYTES + T * model.hidden * 4 * 8;
  const per_machine: MachineForecast[] = machines.map((m, r) => {
    const c = costs[r]!;
    const usable = usableBytes(m, engine);
    const headroom = usable - c.weights - c.kv - activation;
    return {
      name: m.name,
      id: m.spec.id,
      device: device(m, engine),
      memory_bytes: m.memory.gb * GB,
      usable_bytes: usable,
      weights_bytes: c.weights,
      kv_bytes: c.kv,
      activation_bytes: activation,
      headroom_bytes: headroom,
      fits: headroom >= 0,
      read_ms: readMs(c, rates[r]!),
      overhead_ms: c.layerCount * rates[r]!.layerOverheadMs,
    };
  });
  // a token's own fixed cost (embedding, head call, sampling, the loop) runs once along the chain
  const terms = {
    read_ms: 0,
    overhead_ms: Math.max(...rates.map((r) => r.stepOverheadMs ?? 0)),
    link_latency_ms: 0,
    link_bytes_ms: 0,
  };
  const stageMs: number[] = [];
  for (const stage of stages) {
    const slowest = stage.reduce((a, r) =>
      per_machine[r]!.read_ms + per_machine[r]!.overhead_ms >
      per_machine[a]!.read_ms + per_machine[a]!.overhead_ms
        ? r
        : a,
    );
    terms.read_ms += per_machine[slowest]!.read_ms;
    terms.overhead_ms += per_machine[slowest]!.overhead_ms;
    const last = stage === stages[stages.length - 1];
    stageMs.push(
      Math.max(...stage.map((r) => rankPrefillMs(input, rates[r]!, costs[r]!, placement[r]!, last))),
    );
  }
  // in micro-batches the stages overlap: the first piece passes every stage, each further one
  // adds the slowest stage's time for a piece
  const pieces =
    input.engine.pipelinesPrefill && stages.length > 1 ? microBatches(T, stages.length).length : 1;
  let prefillMs = (stageMs.reduce((a, b) => a + b, 0) + (pieces - 1) * Math.max(...stageMs)) / pieces;
  const onLink = linkTimes(input, stages, costs);
  terms.link_latency_ms = onLink.step.latency;
  terms.link_bytes_ms = onLink.step.wire;
  prefillMs += onLink.prefillMs;
  const stepMs = terms.read_ms + terms.overhead_ms + terms.link_latency_ms + terms.link_bytes_ms;
  const labels = {
    read_ms: 'memory bandwidth',
    overhead_ms: 'engine overhead',
    link_latency_ms: 'link latency',
    link_bytes_ms: 'link bandwidth',
  } as const;
  const top = (Object.keys(terms) as (keyof typeof terms)[]).reduce((a, b) => (terms[b] > terms[a] ? b : a));
  return {
    parallel: input.parallel,
    fits: per_machine.every((m) => m.fits),
    placement,
    decode_tok_s: 1000 / stepMs,
    prefill_tok_s: (T / prefillMs) * 1000,
    ttft_ms: prefillMs,
    bottleneck: labels[top],
    terms,
    per_machine,
  };
}

/** The kinds that apply to this model on this many machines. */
export function candidateSplits(model: ModelBytes, n: number): ForecastParallel[] {
  if (n === 1) return ['tp'];
  const out: ForecastParallel[] = ['tp', 'pp'];
  if (model.moe && model.moe.experts >= n) out.push('ep');
  if (n >= 4 && n % 2 === 0) out.push('hybrid');
  return out;
}

/** `--parallel auto`: the fitting split with the fastest decode; the fastest of all when none fits. */
export function forecastAuto(input: Omit<ForecastInput, 'parallel'>): { best: Forecast; all: Forecast[] } {
  const all = candidateSplits(input.model, input.machines.length).map((parallel) =>
    forecastSplit({ ...input, parallel }),
  );
  const fitting = all.filter((f) => f.fits);
  const pool = fitting.length > 0 ? fitting : all;
  return { best: pool.reduce((a, b) => (b.decode_tok_s > a.decode_tok_s ? b : a)), all };
}
