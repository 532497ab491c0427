import { hostname } from 'node:os';
import type { ModelFile } from '../engine/model/model-file.js';
import { isTandemError, TandemError } from '../errors/index.js';
import { createKernels, type Kernels, type KernelsBackend } from '../kernels/index.js';
import { describeAdapter, GpuDevice, type KernelsChoice } from '../kernels/webgpu/index.js';
import { refuseGpuShard, stageShards, type ParallelPlan } from '../parallel/index.js';

/** Where a node's shard runs: on CPU kernels (the engine's Model) or on its GPU (GpuShardModel). */
export type NodeCompute = { kernels: Kernels } | { gpu: GpuDevice };

/** The CPU backend a `--kernels` choice names (undefined: the default, native where it builds). */
export function cpuBackendOf(choice: KernelsChoice | undefined): KernelsBackend | undefined {
  return choice === 'webgpu' || choice === 'auto' ? undefined : choice;
}

/**
 * A node's `--kernels` choice, resolved at each load with the shard the plan gives it:
 *
 * - `webgpu`: the GPU (opened once per session), or a typed error, which the coordinator
 *   reports under this node's name: KERNELS_NO_ADAPTER where Dawn finds no GPU here,
 *   KERNELS_DEVICE_LIMIT where the shard does not run on it (refuseGpuShard says why);
 * - `auto`: the GPU where there is one and the shard runs on it, else the CPU kernels (the
 *   log says why not the GPU);
 * - `native`, `wasm`, `reference` (or none): the CPU kernels as before.
 */
export class NodeKernels {
  private kernels: Kernels | undefined;
  private device: GpuDevice | undefined;
  /** `auto`: why this node has no GPU (probed once). */
  private noGpu: string | undefined;

  constructor(
    private readonly o: { choice?: KernelsChoice; threads?: number; log?: (line: string) => void },
  ) {}

  async forLoad(
    file: ModelFile,
    plan: ParallelPlan,
    rank: number,
    contextLength: number | undefined,
  ): Promise<NodeCompute> {
    const choice = this.o.choice;
    if (choice === 'webgpu' || choice === 'auto') {
      const device = await this.gpu(choice === 'auto');
      const me = plan.ranks[rank];
      if (device && me) {
        const group = stageShards(plan, me.stage);
        const refusal = refuseGpuShard(file, me.shard, group, me.tpRank, device, contextLength);
        if (refusal === undefined) return { gpu: device };
        if (choice === 'webgpu')
          throw new TandemError(
            'KERNELS_DEVICE_LIMIT',
            `--kernels webgpu on ${hostname()} (rank ${rank}): ${refusal}`,
            {
              hint: 'start this node with --kernels auto (falls back to the CPU) or native/wasm, or choose another split',
              details: { rank },
            },
          );
        this.o.log?.(`--kernels auto: rank ${rank}'s shard runs on the CPU kernels: ${refusal}`);
      }
    }
    const backend = cpuBackendOf(choice);
    this.kernels ??= await createKernels({
      ...(backend ? { backend } : {}),
      ...(this.o.threads ? { threads: this.o.threads } : {}),
    });
    return { kernels: this.kernels };
  }

  /** The GPU, opened on first use; `auto`: undefined where there is none. */
  private async gpu(auto: boolean): Promise<GpuDevice | undefined> {
    if (this.device) return this.device;
    if (auto && this.noGpu !== undefined) return undefined;
    try {
      this.device = await GpuDevice.open();
      this.o.log?.(`webgpu: shards run on ${describeAdapter(this.device.info)}`);
      return this.device;
    } catch (e) {
      if (!isTandemError(e)) throw e;
      if (auto) {
        this.noGpu = e.message;
        this.o.log?.(`--kernels auto: no GPU for shards here, CPU kernels: ${e.message}`);
        return undefined;
      }
      throw new TandemError(e.code, `--kernels webgpu on ${hostname()}: ${e.message}`, {
        hint: e.hint ?? 'start this node with --kernels auto or native/wasm',
        cause: e,
      });
    }
  }

  /** Frees the CPU kernels and the GPU device (the session's shard is unloaded first). */
  async close(): Promise<void> {
    await this.kernels?.close().catch(() => undefined);
    this.kernels = undefined;
    if (this.device) await this.device.finish().catch(() => undefined);
    this.device?.destroy();
    this.device = undefined;
  }
}
