import { TandemError } from '../../errors/index.js';
import { macModels } from '../../topology/index.js';

/** One memory configuration of a machine: its size and the bandwidth that configuration has. */
export interface MemoryConfig {
  /** GB (10^9 bytes) as sold. */
  gb: number;
  /** Peak memory bandwidth, GB/s. */
  bandwidthGBs: number;
}

/** A machine a forecast can place a model on. Figures are peaks as published; engines reach a share of them. */
export interface MachineSpec {
  id: string;
  name: string;
  kind: 'apple' | 'x86' | 'arm-sbc' | 'this';
  /** Ascending by size; the first is the default (the smallest configuration). */
  memory: readonly MemoryConfig[];
  cpuCores: number;
  /** CPU peak FP32 GFLOP/s over all cores (cores x clock x SIMD FLOP per cycle). */
  cpuGflops: number;
  /** The share of the memory bandwidth the CPU cores can draw (on Apple silicon the GPU can draw more). */
  cpuBandwidthShare: number;
  /** GPU peak FP32 TFLOP/s (Apple GPUs run FP16 at the same rate); absent where no GPU engine applies. */
  gpuTflops?: number;
  tb5Ports: number;
  tb4Ports: number;
  /** Watts at the wall under an LLM load: an estimate (see docs/plan.md), not a published figure. */
  powerW: number;
  sources: readonly string[];
}

const appleSpecs =
  'Apple newsroom chip announcements and support.apple.com tech specs (bandwidth, memory, cores)';
const appleGpu =
  'GPU FP32 TFLOP/s: Apple keynote figures where given (M1 family, M2 family), else cores x 128 ALUs x 2 x clock';
const anandtechCpuShare =
  'CPU share of bandwidth: AnandTech, "Apple M1 Max review" (2021): the CPU clusters reach about 60% of the package bandwidth';

interface Chip {
  chip: string;
  memory: MemoryConfig[];
  cpuCores: number;
  /** P-cores x clock GHz x 16 FP32 FLOP a cycle (4 x 128-bit FMA), E-cores ignored. */
  pCores: number;
  clockGHz: number;
  gpuTflops?: number;
  powerW: number;
}

const mem = (bw: number, ...gbs: number[]): MemoryConfig[] => gbs.map((gb) => ({ gb, bandwidthGBs: bw }));

const chips: Record<string, Chip> = {
  m1: {
    chip: 'M1',
    memory: mem(68.25, 8, 16),
    cpuCores: 8,
    pCores: 4,
    clockGHz: 3.2,
    gpuTflops: 2.6,
    powerW: 25,
  },
  'm1-pro': {
    chip: 'M1 Pro',
    memory: mem(200, 16, 32),
    cpuCores: 10,
    pCores: 8,
    clockGHz: 3.2,
    gpuTflops: 5.2,
    powerW: 45,
  },
  'm1-max': {
    chip: 'M1 Max',
    memory: mem(400, 32, 64),
    cpuCores: 10,
    pCores: 8,
    clockGHz: 3.2,
    gpuTflops: 10.4,
    powerW: 80,
  },
  'm1-ultra': {
    chip: 'M1 Ultra',
    memory: mem(800, 64, 128),
    cpuCores: 20,
    pCores: 16,
    clockGHz: 3.2,
    gpuTflops: 21,
    powerW: 150,
  },
  m2: {
    chip: 'M2',
    memory: mem(100, 8, 16, 24),
    cpuCores: 8,
    pCores: 4,
    clockGHz: 3.5,
    gpuTflops: 3.6,
    powerW: 25,
  },
  'm2-pro': {
    chip: 'M2 Pro',
    memory: mem(200, 16, 32),
    cpuCores: 12,
    pCores: 8,
    clockGHz: 3.5,
    gpuTflops: 6.8,
    powerW: 50,
  },
  'm2-max': {
    chip: 'M2 Max',
    memory: mem(400, 32, 64, 96),
    cpuCores: 12,
    pCores: 8,
    clockGHz: 3.7,
    gpuTflops: 13.6,
    powerW: 90,
  },
  'm2-ultra': {
    chip: 'M2 Ultra',
    memory: mem(800, 64, 128, 192),
    cpuCores: 24,
    pCores: 16,
    clockGHz: 3.5,
    gpuTflops: 27.2,
    powerW: 170,
  },
  m3: {
    chip: 'M3',
    memory: mem(100, 8, 16, 24),
    cpuCores: 8,
    pCores: 4,
    clockGHz: 4.05,
    gpuTflops: 4.1,
    powerW: 25,
  },
  'm3-pro': {
    chip: 'M3 Pro',
    memory: mem(150, 18, 36),
    cpuCores: 12,
    pCores: 6,
    clockGHz: 4.05,
    gpuTflops: 7.4,
    powerW: 45,
  },
  'm3-max': {
    chip: 'M3 Max',
    memory: [...mem(300, 36, 96), ...mem(400, 48, 64, 128)].sort((a, b) => a.gb - b.gb),
    cpuCores: 16,
    pCores: 12,
    clockGHz: 4.05,
    gpuTflops: 16.4,
    powerW: 90,
  },
  'm3-ultra': {
    chip: 'M3 Ultra',
    memory: mem(819, 96, 256, 512),
    cpuCores: 32,
    pCores: 24,
    clockGHz: 4.05,
    gpuTflops: 28.2,
    powerW: 200,
  },
  m4: {
    chip: 'M4',
    memory: mem(120, 16, 24, 32),
    cpuCores: 10,
    pCores: 4,
    clockGHz: 4.4,
    gpuTflops: 4.3,
    powerW: 30,
  },
  'm4-pro': {
    chip: 'M4 Pro',
    memory: mem(273, 24, 48, 64),
    cpuCores: 14,
    pCores: 10,
    clockGHz: 4.5,
    gpuTflops: 9.2,
    powerW: 60,
  },
  'm4-max': {
    chip: 'M4 Max',
    memory: [{ gb: 36, bandwidthGBs: 410 }, ...mem(546, 48, 64, 128)],
    cpuCores: 16,
    pCores: 12,
    clockGHz: 4.5,
    gpuTflops: 18.4,
    powerW: 100,
  },
  m5: { chip: 'M5', memory: mem(153, 16, 24, 32), cpuCores: 10, pCores: 4, clockGHz: 4.6, powerW: 30 },
};

/** Products: [id, name, chip, Thunderbolt 5 ports, Thunderbolt 4 ports] (ports as in topology's catalog where it has the id). */
const products: [string, string, string, number, number][] = [
  ['macbook-air-m1', 'MacBook Air (M1, 2020)', 'm1', 0, 2],
  ['mac-mini-m1', 'Mac mini (M1, 2020)', 'm1', 0, 2],
  ['macbook-pro-m1-pro', 'MacBook Pro (M1 Pro, 2021)', 'm1-pro', 0, 3],
  ['macbook-pro-m1-max', 'MacBook Pro (M1 Max, 2021)', 'm1-max', 0, 3],
  ['mac-studio-m1-max', 'Mac Studio (M1 Max, 2022)', 'm1-max', 0, 4],
  ['mac-studio-m1-ultra', 'Mac Studio (M1 Ultra, 2022)', 'm1-ultra', 0, 6],
  ['macbook-air-m2', 'MacBook Air (M2, 2022)', 'm2', 0, 2],
  ['mac-mini-m2', 'Mac mini (M2, 2023)', 'm2', 0, 2],
  ['mac-mini-m2-pro', 'Mac mini (M2 Pro, 2023)', 'm2-pro', 0, 4],
  ['macbook-pro-m2-pro', 'MacBook Pro (M2 Pro, 2023)', 'm2-pro', 0, 3],
  ['macbook-pro-m2-max', 'MacBook Pro (M2 Max, 2023)', 'm2-max', 0, 3],
  ['mac-studio-m2-max', 'Mac Studio (M2 Max, 2023)', 'm2-max', 0, 4],
  ['mac-studio-m2-ultra', 'Mac Studio (M2 Ultra, 2023)', 'm2-ultra', 0, 6],
  ['mac-pro-m2-ultra', 'Mac Pro (M2 Ultra, 2023)', 'm2-ultra', 0, 8],
  ['macbook-air-m3', 'MacBook Air (M3, 2024)', 'm3', 0, 2],
  ['macbook-pro-m3', 'MacBook Pro 14-inch (M3, 2023)', 'm3', 0, 2],
  ['macbook-pro-m3-pro', 'MacBook Pro (M3 Pro, 2023)', 'm3-pro', 0, 3],
  ['macbook-pro-m3-max', 'MacBook Pro (M3 Max, 2023)', 'm3-max', 0, 3],
  ['mac-studio-m3-ultra', 'Mac Studio (M3 Ultra, 2025)', 'm3-ultra', 6, 0],
  ['macbook-air-m4', 'MacBook Air (M4, 2025)', 'm4', 0, 2],
  ['mac-mini-m4', 'Mac mini (M4, 2024)', 'm4', 0, 3],
  ['macbook-pro-m4', 'MacBook Pro 14-inch (M4, 2024)', 'm4', 0, 3],
  ['mac-mini-m4-pro', 'Mac mini (M4 Pro, 2024)', 'm4-pro', 3, 0],
  ['macbook-pro-m4-pro', 'MacBook Pro (M4 Pro, 2024)', 'm4-pro', 3, 0],
  ['macbook-pro-m4-max', 'MacBook Pro (M4 Max, 2024)', 'm4-max', 3, 0],
  ['mac-studio-m4-max', 'Mac Studio (M4 Max, 2025)', 'm4-max', 4, 0],
  ['macbook-pro-m5', 'MacBook Pro 14-inch (M5, 2025)', 'm5', 0, 3],
];

function apple([id, name, chipId, tb5, tb4]: [string, string, string, number, number]): MachineSpec {
  const c = chips[chipId]!;
  const topo = macModels.find((m) => m.id === id);
  return {
    id,
    name,
    kind: 'apple',
    memory: c.memory,
    cpuCores: c.cpuCores,
    cpuGflops: Math.round(c.pCores * c.clockGHz * 16),
    cpuBandwidthShare: 0.6,
    ...(c.gpuTflops !== undefined ? { gpuTflops: c.gpuTflops } : {}),
    tb5Ports: topo ? topo.tb5Ports.length : tb5,
    tb4Ports: topo ? topo.tb4Ports : tb4,
    powerW: c.powerW,
    sources: [appleSpecs, appleGpu, anandtechCpuShare],
  };
}

const ddr = (channels: number, mts: number, bits = 64): number => (channels * mts * bits) / 8 / 1000;

/** Other machines people cluster: desktops, servers, single-board computers. */
const others: MachineSpec[] = [
  {
    id: 'desktop-ddr4',
    name: 'x86 desktop, 8 cores, dual-channel DDR4-3200',
    kind: 'x86',
    memory: [32, 64, 128].map((gb) => ({ gb, bandwidthGBs: ddr(2, 3200) })),
    cpuCores: 8,
    cpuGflops: 8 * 3.6 * 32,
    cpuBandwidthShare: 0.85,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 150,
    sources: ['JEDEC DDR4-3200: 25.6 GB/s a channel', 'AVX2: 2 FMA units x 8 FP32 = 32 FLOP a cycle'],
  },
  {
    id: 'desktop-ddr5',
    name: 'x86 desktop, 16 cores, dual-channel DDR5-5600',
    kind: 'x86',
    memory: [32, 64, 96, 192].map((gb) => ({ gb, bandwidthGBs: ddr(2, 5600) })),
    cpuCores: 16,
    cpuGflops: 16 * 4.5 * 32,
    cpuBandwidthShare: 0.85,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 250,
    sources: ['JEDEC DDR5-5600: 44.8 GB/s a channel', 'AVX2/AVX-512 (Zen 4): 32 FP32 FLOP a cycle'],
  },
  {
    id: 'ryzen-ai-max-395',
    name: 'AMD Ryzen AI Max+ 395 (256-bit LPDDR5X-8000)',
    kind: 'x86',
    memory: [64, 128].map((gb) => ({ gb, bandwidthGBs: ddr(1, 8000, 256) })),
    cpuCores: 16,
    cpuGflops: 16 * 5.1 * 32,
    cpuBandwidthShare: 0.5,
    gpuTflops: 14.8,
    tb5Ports: 0,
    tb4Ports: 2,
    powerW: 140,
    sources: ['AMD product page: 256-bit LPDDR5X-8000', 'Radeon 8060S: 40 CUs x 64 lanes x 2 x 2.9 GHz'],
  },
  {
    id: 'server-epyc-genoa',
    name: 'AMD EPYC 9654 (96 cores, 12-channel DDR5-4800)',
    kind: 'x86',
    memory: [384, 768, 1536].map((gb) => ({ gb, bandwidthGBs: ddr(12, 4800) })),
    cpuCores: 96,
    cpuGflops: 96 * 2.4 * 32,
    cpuBandwidthShare: 0.8,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 600,
    sources: ['AMD EPYC 9004 datasheet: 12 DDR5-4800 channels', 'Zen 4: 32 FP32 FLOP a cycle'],
  },
  {
    id: 'server-xeon-spr',
    name: 'Intel Xeon Platinum 8480+ (56 cores, 8-channel DDR5-4800)',
    kind: 'x86',
    memory: [256, 512, 1024].map((gb) => ({ gb, bandwidthGBs: ddr(8, 4800) })),
    cpuCores: 56,
    cpuGflops: 56 * 2.0 * 64,
    cpuBandwidthShare: 0.8,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 550,
    sources: ['Intel ARK: 8 DDR5-4800 channels', 'AVX-512: 2 FMA units x 16 FP32 = 64 FLOP a cycle'],
  },
  {
    id: 'raspberry-pi-5',
    name: 'Raspberry Pi 5 (LPDDR4X-4267, 32-bit)',
    kind: 'arm-sbc',
    memory: [4, 8, 16].map((gb) => ({ gb, bandwidthGBs: ddr(1, 4267, 32) })),
    cpuCores: 4,
    cpuGflops: 4 * 2.4 * 16,
    cpuBandwidthShare: 0.6,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 10,
    sources: ['raspberrypi.com product brief: LPDDR4X-4267 SDRAM, 4x Cortex-A76 at 2.4 GHz'],
  },
  {
    id: 'raspberry-pi-4',
    name: 'Raspberry Pi 4 (LPDDR4-3200, 32-bit)',
    kind: 'arm-sbc',
    memory: [2, 4, 8].map((gb) => ({ gb, bandwidthGBs: ddr(1, 3200, 32) })),
    cpuCores: 4,
    cpuGflops: 4 * 1.8 * 8,
    cpuBandwidthShare: 0.5,
    tb5Ports: 0,
    tb4Ports: 0,
    powerW: 7,
    sources: ['raspberrypi.com product brief: LPDDR4-3200 SDRAM, 4x Cortex-A72 at 1.8 GHz'],
  },
];

export const machineCatalog: readonly MachineSpec[] = [...products.map(apple), ...others];

export function findMachineSpec(id: string): MachineSpec {
  const found = machineCatalog.find((m) => m.id === id.trim().toLowerCase());
  if (!found)
    throw new TandemError('TOPOLOGY_UNKNOWN_MACHINE', `plan: unknown machine '${id}'`, {
      hint: `use one of the ids of tandem plan --list-machines (e.g. mac-studio-m3-ultra:512g), or 'this' after tandem plan --calibrate`,
      details: { machine: id },
    });
  return found;
}
