import { TandemError } from '../../errors/index.js';
import { findMachineSpec, type MachineSpec } from './machine-catalog.js';
import type { ForecastMachine, ForecastRates } from './predict.js';

/** The most machines one forecast takes (as `topology plan`). */
export const maxForecastMachines = 64;

/** The layer shape and prompt length the prefill probe ran at (calibrate-prefill.ts). */
export interface PrefillShape {
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Feed-forward width (SwiGLU: gate, up and down of hidden x ff). */
  ff: number;
  /** Prompt tokens of one forward. */
  tokens: number;
}

/**
 * What `tandem plan --calibrate` measured on this machine: its memory, cores, and the rates
 * tandem's own kernels reached. The optional fields came later; a file without them still
 * forecasts (without the step's and the prefill's fixed costs).
 */
export interface Calibration {
  date: string;
  threads: number;
  memoryBytes: number;
  cpuCores: number;
  /** Decode: Q8_0 weight bytes a second streamed through the matvec (the samples' median). */
  decodeBytesPerS: number;
  /** Prefill: the GEMMs' FLOP/s at the probe's shapes and prompt (`prefillShape`; older files: one 2048-wide 64-token matmul). */
  prefillFlopsPerS: number;
  /** The prefill GEMMs' FLOP/s over the stream's bytes a second, sample by sample (their median): compute per stream byte in one mode. */
  prefillFlopsPerStreamByte?: number;
  /** Prefill: causal attention's FLOP/s over the probe's prompt (2 H d T^2 a layer). */
  prefillAttentionFlopsPerS?: number;
  /** The shape the prefill probe ran at. */
  prefillShape?: PrefillShape;
  /** The prefill probe's speedup on `threads` over 1 thread, sampled in alternation (absent at 1 thread). */
  prefillThreadScaling?: number;
  /**
   * Decode: ms a layer costs per token beyond streaming its weights: attention, norms, RoPE, the
   * KV store, the JS between calls (the decode probe at the model's width; older files: the
   * narrow twin's slope).
   */
  layerOverheadMs: number;
  /**
   * Decode: the layers' weights' bytes a second at the model's shapes (the decode probe: every
   * matvec a layer calls, the leaves of o and down included, each with its call and hand-off)
   * over the stream probe's rate, paired sample by sample. Absent in older files: 1.
   */
  decodeLayerShare?: number;
  /** Decode: kernel calls a layer's step makes (the decode probe's count; the step's own few spread over its layers). */
  decodeCallsPerLayer?: number;
  /** Decode: ms a token costs beyond its layers and weights (embedding, head call, sampling, loop). */
  stepOverheadMs?: number;
  /**
   * Prefill: ms per layer per prompt token beyond the GEMMs and attention (norms, RoPE, the KV
   * store, the calls' hand-offs, the JS between them), at `prefillShape.hidden`; older files:
   * beyond the matmuls only, attention included.
   */
  prefillLayerTokenMs?: number;
  /** Mean ms from waking a sleeping thread to its running: each pipeline hand-off pays it. */
  wakeMs?: number;
  /** The slowest and the fastest stream sample (bytes a second): the decode forecast's range. */
  decodeBytesPerSRange?: [number, number];
  /** Every stream sample, in the order taken (bytes a second). */
  streamSamples?: number[];
  /** Share of the samples within FAST_MODE_SHARE of the fastest: how much of the probe saw the VM's fast mode. */
  fastShare?: number;
}

/** The rates a forecast of a calibrated machine uses. */
export function calibratedRates(c: Calibration): ForecastRates {
  return {
    decodeBytesPerS: c.decodeBytesPerS,
    prefillFlopsPerS: c.prefillFlopsPerS,
    layerOverheadMs: c.layerOverheadMs,
    stepOverheadMs: c.stepOverheadMs ?? 0,
    decodeLayerShare: c.decodeLayerShare ?? 1,
    prefillLayerTokenMs: c.prefillLayerTokenMs ?? 0,
    wakeMs: c.wakeMs ?? 0,
    ...(c.prefillAttentionFlopsPerS !== undefined && c.prefillShape
      ? { prefillAttentionFlopsPerS: c.prefillAttentionFlopsPerS, prefillWidth: c.prefillShape.hidden }
      : {}),
  };
}

export function thisMachine(c: Calibration | undefined): MachineSpec {
  if (!c)
    throw new TandemError('PAR_NOT_CALIBRATED', "plan: 'this' needs a calibration of this machine", {
      hint: 'run `tandem plan --calibrate` first (about a minute); it measures memory bandwidth and kernel speed here',
    });
  return {
    id: 'this',
    name: `this machine (calibrated ${c.date}, ${c.threads} threads)`,
    kind: 'this',
    memory: [{ gb: c.memoryBytes / 1e9, bandwidthGBs: c.decodeBytesPerS / 1e9 }],
    cpuCores: c.cpuCores,
    cpuGflops: c.prefillFlopsPerS / 1e9,
    cpuBandwidthShare: 1,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 0,
    sources: ['tandem plan --calibrate'],
  };
}

function badPart(part: string, why: string): TandemError {
  return new TandemError('TOPOLOGY_UNKNOWN_MACHINE', `plan: cannot read '${part}' in --machines: ${why}`, {
    hint: 'write machines as "3x macbook-pro-m4-max:64g, 1x mac-studio-m3-ultra:512g" (tandem plan --list-machines)',
    details: { part },
  });
}

/** Parses `"3x macbook-pro-m4-max:64g, 1x mac-studio-m3-ultra:512g, this"` (memory suffix optional: the smallest). */
export function parseForecastMachines(spec: string, calibration?: Calibration): ForecastMachine[] {
  const out: ForecastMachine[] = [];
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const match = /^(?:(\d+)\s*[x*]\s*)?([a-z0-9.-]+)(?::(\d+(?:\.\d+)?)\s*g(?:b)?)?$/i.exec(part);
    if (!match) throw badPart(part, 'expected [COUNT x] ID[:MEMORYg]');
    const count = match[1] === undefined ? 1 : Number(match[1]);
    if (count < 1) throw badPart(part, `${count} machines`);
    if (out.length + count > maxForecastMachines)
      throw badPart(part, `more than ${maxForecastMachines} machines in all`);
    const id = match[2]!.toLowerCase();
    const machine = id === 'this' ? thisMachine(calibration) : findMachineSpec(id);
    const gb = match[3] === undefined ? undefined : Number(match[3]);
    const memory = gb === undefined ? machine.memory[0]! : machine.memory.find((m) => m.gb === gb);
    if (!memory)
      throw badPart(
        part,
        `${machine.id} comes with ${machine.memory.map((m) => `${m.gb}g`).join(', ')}, not ${gb}g`,
      );
    for (let i = 0; i < count; i++)
      out.push({
        name: machine.id,
        spec: machine,
        memory,
        ...(id === 'this' && calibration ? { rates: calibratedRates(calibration) } : {}),
      });
  }
  if (out.length === 0) throw badPart(spec, 'no machine named');
  const total = new Map<string, number>();
  for (const m of out) total.set(m.name, (total.get(m.name) ?? 0) + 1);
  const seen = new Map<string, number>();
  for (const m of out) {
    const k = (seen.get(m.name) ?? 0) + 1;
    seen.set(m.name, k);
    if ((total.get(m.name) ?? 0) > 1) m.name = `${m.name}-${k}`;
  }
  return out;
}
