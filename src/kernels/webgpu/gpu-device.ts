import { TandemError } from '../../errors/index.js';
import { findAdapter, type AdapterInfo, type GpuLimits } from './adapter.js';

/** GPUBufferUsage / GPUMapMode flag values (WebGPU spec); Dawn's globals are not installed on globalThis. */
const USAGE = { MAP_READ: 1, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128 } as const;
const MAP_READ = 1;

/** Bytes of one uniform slot: the largest minUniformBufferOffsetAlignment WebGPU allows. */
const SLOT = 256;
/** Uniform slots per page; a flush that records more dispatches takes another page. */
const SLOTS_PER_PAGE = 256;

/** Where a dispatch's parameters go: up to SLOT bytes of u32/f32 words. */
export type Params = Uint32Array | Float32Array | ArrayBuffer;

/**
 * One WebGPU device and the few things every kernel needs from it: storage buffers checked
 * against the adapter's limits, a pipeline cache (one compiled pipeline per kernel name),
 * and a recorder that puts the dispatches of a step into one compute pass and submits them
 * together at `flush`. Reads flush first, so results are never read before they are computed.
 *
 * Kernel convention: `@group(0) @binding(0)` is the uniform parameter block, bindings 1..
 * the storage buffers in the order `dispatch` is given them.
 */
export class GpuDevice {
  private readonly pipelines = new Map<string, GPUComputePipeline>();
  private readonly pages: GPUBuffer[] = [];
  private slot = 0;
  private encoder: GPUCommandEncoder | undefined;
  private pass: GPUComputePassEncoder | undefined;
  private lost: string | undefined;
  /** The first validation or out-of-memory error Dawn reported (WGSL, bindings); reads throw it. */
  private failure: string | undefined;
  /** Dispatches recorded since the device was opened (tests and benchmarks count submissions). */
  dispatches = 0;
  submissions = 0;

  private constructor(
    readonly device: GPUDevice,
    readonly info: AdapterInfo,
    readonly limits: GpuLimits,
  ) {
    void device.lost.then((l) => {
      this.lost = `${l.reason}: ${l.message}`;
    });
    device.onuncapturederror = (e) => {
      this.failure ??= e.error.message;
    };
  }

  /**
   * Opens the adapter's device with its full buffer and workgroup limits, or with `lower`
   * ones where given (tests: a model past a small device's limits on any adapter).
   */
  static async open(lower: Partial<GpuLimits> = {}): Promise<GpuDevice> {
    const found = await findAdapter();
    const l = { ...found.limits };
    for (const [key, value] of Object.entries(lower) as [keyof GpuLimits, number][])
      l[key] = Math.min(l[key], value);
    let device: GPUDevice;
    try {
      device = await found.adapter.requestDevice({
        requiredLimits: {
          maxBufferSize: l.maxBufferSize,
          maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
          maxStorageBuffersPerShaderStage: l.maxStorageBuffersPerShaderStage,
          maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
          maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
        },
      });
    } catch (cause) {
      throw new TandemError('KERNELS_NO_ADAPTER', `the WebGPU adapter gave no device: ${String(cause)}`, {
        hint: 'check the GPU driver (vulkaninfo), or use --kernels native/wasm',
        cause,
      });
    }
    return new GpuDevice(device, found.info, l);
  }

  /** The largest buffer one binding may see: a weight larger than this is split into row chunks. */
  get maxBinding(): number {
    return Math.min(this.limits.maxStorageBufferBindingSize, this.limits.maxBufferSize);
  }

  /** A storage buffer of `bytes` (rounded up to 4), refused past the adapter's limits. */
  storage(bytes: number, label: string): GPUBuffer {
    this.check();
    const size = Math.max(4, Math.ceil(bytes / 4) * 4);
    if (size > this.maxBinding) {
      throw new TandemError(
        'KERNELS_DEVICE_LIMIT',
        `${label}: ${size} bytes exceed the adapter's largest storage binding (maxStorageBufferBindingSize ${this.limits.maxStorageBufferBindingSize}, maxBufferSize ${this.limits.maxBufferSize})`,
        {
          hint: 'use a smaller context or model, split it across nodes, or use --kernels native/wasm',
          details: { label, size },
        },
      );
    }
    return this.device.createBuffer({
      label,
      size,
      usage: USAGE.STORAGE | USAGE.COPY_SRC | USAGE.COPY_DST,
    });
  }

  /** A storage buffer holding `data` (its byte length padded to 4 with zeros). */
  upload(data: ArrayBufferView, label: string): GPUBuffer {
    const buffer = this.storage(data.byteLength, label);
    this.write(buffer, data);
    return buffer;
  }

  /** Queues a write of `data` at byte `offset`; it lands before anything submitted afterwards runs. */
  write(buffer: GPUBuffer, data: ArrayBufferView, offset = 0): void {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const padded = bytes.byteLength % 4 === 0 ? bytes : padTo4(bytes);
    this.device.queue.writeBuffer(buffer, offset, padded);
  }

  /** The compiled pipeline of kernel `name`, compiled from `code` on first use. */
  pipeline(name: string, code: string): GPUComputePipeline {
    let p = this.pipelines.get(name);
    if (!p) {
      const module = this.device.createShaderModule({ label: name, code });
      p = this.device.createComputePipeline({
        label: name,
        layout: 'auto',
        compute: { module, entryPoint: 'main' },
      });
      this.pipelines.set(name, p);
    }
    return p;
  }

  /**
   * Compiles kernels ahead of their first dispatch, each in a turn of the event loop of its
   * own: `pipeline` compiles on first use, synchronously (on lavapipe a shader can take seconds
   * under load), and several first uses in one recorded pass would stall the process, a
   * node's heartbeats included, for their sum. Kernels compiled already are skipped.
   */
  async precompile(kernels: Iterable<readonly [name: string, code: string]>): Promise<void> {
    for (const [name, code] of kernels) {
      if (this.pipelines.has(name)) continue;
      await new Promise((resolve) => setImmediate(resolve));
      const module = this.device.createShaderModule({ label: name, code });
      const compute = { module, entryPoint: 'main' };
      this.pipelines.set(
        name,
        await this.device.createComputePipelineAsync({ label: name, layout: 'auto', compute }),
      );
    }
  }

  /** Records kernel `name` over `groups` workgroups with `params` and the storage `buffers`. */
  dispatch(
    name: string,
    code: string,
    params: Params,
    buffers: readonly GPUBuffer[],
    groups: readonly number[],
  ): void {
    this.check();
    const pipeline = this.pipeline(name, code);
    const { page, offset } = this.nextSlot();
    const bytes =
      params instanceof ArrayBuffer
        ? new Uint8Array(params)
        : new Uint8Array(params.buffer, params.byteOffset, params.byteLength);
    this.device.queue.writeBuffer(page, offset, bytes);
    const bind = this.device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: page, offset, size: SLOT } },
        ...buffers.map((buffer, i) => ({ binding: i + 1, resource: { buffer } })),
      ],
    });
    this.encoder ??= this.device.createCommandEncoder();
    this.pass ??= this.encoder.beginComputePass();
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, bind);
    this.pass.dispatchWorkgroups(groups[0] ?? 1, groups[1] ?? 1, groups[2] ?? 1);
    this.dispatches++;
  }

  /** Submits what was recorded (one submission); the uniform slots are free again afterwards. */
  flush(): void {
    if (!this.encoder) return;
    this.pass?.end();
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = undefined;
    this.pass = undefined;
    this.slot = 0;
    this.submissions++;
  }

  /** Flushes, then reads `bytes` of `buffer` from byte `offset` back as f32s. */
  async read(buffer: GPUBuffer, bytes: number, offset = 0): Promise<Float32Array> {
    return this.readParts([{ buffer, bytes, offset }], bytes);
  }

  private async readParts(
    parts: readonly { buffer: GPUBuffer; bytes: number; offset?: number }[],
    bytes: number,
  ): Promise<Float32Array> {
    this.flush();
    const staging = this.device.createBuffer({ size: bytes, usage: USAGE.MAP_READ | USAGE.COPY_DST });
    const enc = this.device.createCommandEncoder();
    let at = 0;
    for (const p of parts) {
      if (p.bytes > 0) enc.copyBufferToBuffer(p.buffer, p.offset ?? 0, staging, at, p.bytes);
      at += p.bytes;
    }
    this.device.queue.submit([enc.finish()]);
    try {
      await staging.mapAsync(MAP_READ);
    } catch (cause) {
      throw new TandemError(
        'KERNELS_GPU_FAILED',
        `reading ${bytes} bytes back from the GPU failed: ${String(cause)}${this.lost ? ` (device lost: ${this.lost})` : ''}`,
        {
          hint: 'the GPU device failed or was lost; rerun, or use --kernels native/wasm',
          cause,
        },
      );
    }
    const out = new Float32Array(staging.getMappedRange().slice(0));
    staging.unmap();
    staging.destroy();
    this.check();
    return out;
  }

  /**
   * Flushes, then reads several ranges back at once (one copy each into one staging buffer,
   * one map): parts[i] gives bytes of a buffer from a byte offset (multiples of 4); an empty
   * part gives an empty array.
   */
  async readMany(
    parts: readonly { buffer: GPUBuffer; bytes: number; offset?: number }[],
  ): Promise<Float32Array[]> {
    const total = parts.reduce((a, p) => a + p.bytes, 0);
    if (total === 0) return parts.map(() => new Float32Array(0));
    const all = await this.readParts(parts, total);
    let at = 0;
    return parts.map((p) => all.slice(at / 4, (at += p.bytes) / 4));
  }

  /** Flushes and waits until the GPU has done everything submitted. */
  async finish(): Promise<void> {
    this.flush();
    await this.device.queue.onSubmittedWorkDone();
  }

  destroy(): void {
    for (const page of this.pages) page.destroy();
    this.pages.length = 0;
    this.device.destroy();
  }

  private nextSlot(): { page: GPUBuffer; offset: number } {
    const index = Math.floor(this.slot / SLOTS_PER_PAGE);
    while (this.pages.length <= index) {
      this.pages.push(
        this.device.createBuffer({ size: SLOT * SLOTS_PER_PAGE, usage: USAGE.UNIFORM | USAGE.COPY_DST }),
      );
    }
    const offset = (this.slot % SLOTS_PER_PAGE) * SLOT;
    this.slot++;
    return { page: this.pages[index] as GPUBuffer, offset };
  }

  private check(): void {
    if (this.failure !== undefined) {
      throw new TandemError('KERNELS_GPU_FAILED', `WebGPU reported an error: ${this.failure}`, {
        hint: 'a kernel or buffer was refused by the device; report it with the message, and use --kernels native/wasm meanwhile',
      });
    }
    if (this.lost !== undefined) {
      throw new TandemError('KERNELS_GPU_FAILED', `the WebGPU device was lost (${this.lost})`, {
        hint: 'rerun; if it repeats, check the GPU driver or use --kernels native/wasm',
      });
    }
  }
}

function padTo4(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
  out.set(bytes);
  return out;
}
