import { TandemError } from '../../errors/index.js';
import type { KernelsBackend } from '../types.js';
import { probeAdapter, describeAdapter, type GpuLimits } from './adapter.js';
import { GpuDevice } from './gpu-device.js';

/**
 * `--kernels`: which backend runs the math. The one place where the platform (a C compiler
 * for native) and the adapter (a WebGPU device, and whether the model fits its limits) decide.
 *
 * - `webgpu`: the GPU through Dawn, or a typed error naming what is missing or too large.
 * - `auto`: webgpu where an adapter is found and the model fits its limits, else native
 *   where the native kernels build here, else wasm.
 * - `native`, `wasm`, `reference`: the CPU backends as before.
 */
export type KernelsChoice = 'auto' | 'webgpu' | KernelsBackend;

export const kernelsChoices: readonly KernelsChoice[] = ['auto', 'webgpu', 'native', 'wasm', 'reference'];

export function isKernelsChoice(value: string): value is KernelsChoice {
  return (kernelsChoices as readonly string[]).includes(value);
}

/** Why a model cannot run on an adapter with these limits (undefined: it can). */
export type GpuRefusal = (limits: GpuLimits) => string | undefined;

export type ChosenKernels =
  | { backend: 'webgpu'; device: GpuDevice; adapter: string }
  | { backend: KernelsBackend | undefined; note?: string };

/**
 * Resolves a choice. `refuse` says why the model would not run on a given adapter (types the
 * WGSL kernels do not read, a buffer past a limit). Without a choice the CPU default stands
 * (backend undefined: native when it builds here, else wasm).
 */
export async function chooseKernels(
  choice: KernelsChoice | undefined,
  refuse: GpuRefusal,
): Promise<ChosenKernels> {
  if (choice !== 'webgpu' && choice !== 'auto') return { backend: choice };
  if (choice === 'auto') {
    const probe = await probeAdapter();
    const refusal = probe.found ? refuse(probe.found.limits) : undefined;
    if (!probe.found || refusal !== undefined)
      return { backend: await cpuBackend(), note: `--kernels auto: not webgpu: ${probe.reason ?? refusal}` };
  }
  const device = await GpuDevice.open();
  const refusal = refuse(device.limits);
  if (refusal !== undefined) {
    device.destroy();
    throw new TandemError('KERNELS_DEVICE_LIMIT', `--kernels webgpu: ${refusal}`, {
      hint: 'use --kernels native/wasm (or auto, which falls back) for this model',
    });
  }
  return { backend: 'webgpu', device, adapter: describeAdapter(device.info) };
}

/** native where the C kernels build and load here, else wasm. */
async function cpuBackend(): Promise<KernelsBackend> {
  const { loadNativeLib } = await import('../native-lib.js');
  return (await loadNativeLib()) ? 'native' : 'wasm';
}
