import { TandemError } from '../../errors/index.js';

/**
 * Finding a WebGPU adapter through Dawn's Node binding (the `webgpu` npm package). Every way
 * this can fail (the binding does not load, Dawn finds no adapter, the adapter gives no
 * device) is a KERNELS_NO_ADAPTER error naming the missing piece; `probeAdapter` turns it into
 * a reason for `--kernels auto`.
 */

/** What the rest of the backend reads from an adapter: who it is and its limits. */
export interface AdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** Dawn's fallback (software) adapter, as opposed to a driver Dawn found. */
  fallback: boolean;
}

/** The limits the kernels depend on, read from the adapter (the device asks for these). */
export interface GpuLimits {
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
  maxStorageBuffersPerShaderStage: number;
  maxComputeWorkgroupStorageSize: number;
  maxComputeInvocationsPerWorkgroup: number;
  maxComputeWorkgroupsPerDimension: number;
}

export interface FoundAdapter {
  adapter: GPUAdapter;
  info: AdapterInfo;
  limits: GpuLimits;
  /** The adapter offers `shader-f16` (not needed: f16 weights are unpacked from u32 pairs). */
  shaderF16: boolean;
}

const HINT =
  'install a Vulkan driver (on Debian 12: bin/setup.sh adds bookworm-backports and installs mesa-vulkan-drivers, the lavapipe CPU driver), or use --kernels native/wasm';

let gpuPromise: Promise<GPU> | undefined;

/** Dawn's `navigator.gpu`, created once per process. */
async function loadGpu(): Promise<GPU> {
  gpuPromise ??= (async () => {
    let mod: { create(options: string[]): GPU };
    try {
      mod = (await import('webgpu')) as { create(options: string[]): GPU };
    } catch (cause) {
      throw new TandemError(
        'KERNELS_NO_ADAPTER',
        `the WebGPU binding (npm package 'webgpu', Dawn) did not load on ${process.platform}-${process.arch}: ${String(cause)}`,
        {
          hint: 'run `npm ci` in the checkout (the package ships its binaries), or use --kernels native/wasm',
          cause,
        },
      );
    }
    return mod.create([]);
  })();
  return gpuPromise;
}

function readLimits(limits: GPUSupportedLimits): GpuLimits {
  return {
    maxBufferSize: limits.maxBufferSize,
    maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
    maxStorageBuffersPerShaderStage: limits.maxStorageBuffersPerShaderStage,
    maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
    maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
    maxComputeWorkgroupsPerDimension: limits.maxComputeWorkgroupsPerDimension,
  };
}

/** The high-performance adapter Dawn finds here; throws KERNELS_NO_ADAPTER when there is none. */
export async function findAdapter(): Promise<FoundAdapter> {
  if (process.env.TANDEM_WEBGPU === 'off')
    throw new TandemError('KERNELS_NO_ADAPTER', 'WebGPU is turned off here (TANDEM_WEBGPU=off)', {
      hint: 'unset TANDEM_WEBGPU to use the GPU, or use --kernels native/wasm',
    });
  const gpu = await loadGpu();
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (cause) {
    throw new TandemError('KERNELS_NO_ADAPTER', `WebGPU requestAdapter() failed: ${String(cause)}`, {
      hint: HINT,
      cause,
    });
  }
  if (!adapter) {
    throw new TandemError(
      'KERNELS_NO_ADAPTER',
      'WebGPU found no adapter: Dawn saw no Vulkan (Linux), Metal (macOS) or D3D12 (Windows) device here',
      { hint: HINT },
    );
  }
  const i = adapter.info;
  return {
    adapter,
    info: {
      vendor: i.vendor,
      architecture: i.architecture,
      device: i.device,
      description: i.description,
      fallback: Boolean((i as { isFallbackAdapter?: boolean }).isFallbackAdapter),
    },
    limits: readLimits(adapter.limits),
    shaderF16: adapter.features.has('shader-f16'),
  };
}

/** undefined when an adapter is found, else why not (the error's message): for `--kernels auto`. */
export async function probeAdapter(): Promise<{ found?: FoundAdapter; reason?: string }> {
  try {
    return { found: await findAdapter() };
  } catch (error) {
    return { reason: error instanceof Error ? error.message : String(error) };
  }
}

/** A short name for the adapter: `llvmpipe (mesa, software)`, `NVIDIA H200 (nvidia, hopper)`. */
export function describeAdapter(info: AdapterInfo): string {
  const name = info.description.split(':')[0]?.trim() || info.device || 'unnamed adapter';
  const what = [info.vendor, info.architecture].filter(Boolean).join(', ');
  return what ? `${name} (${what})` : name;
}
