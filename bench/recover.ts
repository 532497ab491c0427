// `tandem bench recover`: a model served across local members, streams running, one member
// SIGKILLed mid-stream; how long the coordinator took to see it, to re-place the model, and
// until the first token computed on the survivors, and whether each text equals the run without the failure.
import { availableParallelism } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiServer } from '../src/api/http-server.js';
import { loadClusterServedModel } from '../src/api/cluster-served-model.js';
import type { ClusterView } from '../src/cluster/index.js';
import { TandemError } from '../src/errors/index.js';
import { streamCompletion, type StreamedCompletion } from '../src/api/sse-reader.js';
import { benchPromptFor } from './model.js';
import { formatTable } from './table.js';

export interface RecoverBenchOptions {
  model: string;
  members: number;
  streams: number;
  promptTokens: number;
  maxTokens: number;
  /** Compute threads per member (default: the cores shared out). */
  threads?: number;
  onProgress?: (line: string) => void;
}

/** The `--json` line, in the field order. */
export interface RecoverBenchRow {
  detect_ms: number;
  replace_ms: number;
  resume_ms: number;
  streams: number;
  streams_completed: number;
  texts_equal: boolean;
}

async function stream(
  url: string,
  prompt: readonly number[],
  maxTokens: number,
  onChunk?: () => void,
): Promise<StreamedCompletion> {
  return streamCompletion(
    url,
    { prompt, max_tokens: maxTokens, temperature: 0 },
    { signal: AbortSignal.timeout(600_000), clock: Date.now, ...(onChunk ? { onText: onChunk } : {}) },
  );
}

/** Distinct prompts: the bench prompt with its tokens rotated per stream. */
export function prompts(base: readonly number[], n: number): number[][] {
  return Array.from({ length: n }, (_, i) => [
    ...base.slice(i % base.length),
    ...base.slice(0, i % base.length),
  ]);
}

export async function benchRecover(o: RecoverBenchOptions): Promise<RecoverBenchRow> {
  if (o.members < 2)
    throw new TandemError('CLI_USAGE', `bench recover: --members must be at least 2, got ${o.members}`, {
      hint: 'one member must survive the kill: for example --members 3',
    });
  const threads = o.threads ?? Math.max(1, Math.floor(availableParallelism() / o.members));
  const progress = o.onProgress ?? (() => {});
  const server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots: o.streams,
    maxQueue: o.streams,
    load: () =>
      loadClusterServedModel(o.model, {
        nodes: o.members,
        parallel: 'tp',
        threads,
        context: o.promptTokens + o.maxTokens + 8,
        log: progress,
      }),
  });
  try {
    await server.ready;
    const inputs = prompts(benchPromptFor(o.model, o.promptTokens), o.streams);
    progress(`${o.streams} streams without a failure (the texts to compare with)`);
    const reference = await Promise.all(inputs.map((p) => stream(server.url, p, o.maxTokens)));
    const view = (await (await fetch(`${server.url}/v1/cluster`)).json()) as ClusterView;
    const victim = view.members[1];
    if (!victim?.pid)
      throw new TandemError('INTERNAL', 'bench recover: no pid for member 1', { hint: 'a bug' });
    progress(
      `${o.streams} streams again; SIGKILL of ${victim.id} (pid ${victim.pid}) once a quarter of the tokens are out`,
    );
    let chunks = 0;
    let killedAt = 0;
    const kill = (): void => {
      if (killedAt === 0 && ++chunks >= Math.max(1, Math.floor((o.streams * o.maxTokens) / 4))) {
        killedAt = Date.now();
        process.kill(victim.pid as number, 'SIGKILL');
      }
    };
    const runs = await Promise.all(inputs.map((p) => stream(server.url, p, o.maxTokens, kill)));
    if (killedAt === 0) {
      throw new TandemError('INTERNAL', 'bench recover: the streams ended before the kill', {
        hint: 'ask for more --max-tokens',
      });
    }
    const after = (await (await fetch(`${server.url}/v1/cluster`)).json()) as ClusterView;
    const at = (kind: string): number =>
      (after.events.find((e) => e.kind === kind && e.atMs >= killedAt)?.atMs ?? NaN) - killedAt;
    // a token out after the re-placement was computed on the survivors (those just after the
    // kill may have been computed before it)
    const replaced = killedAt + at('replaced');
    const resumed = Math.min(...runs.map((r) => r.chunkTimes.find((t) => t > replaced) ?? Infinity));
    return {
      detect_ms: at('lost'),
      replace_ms: at('replaced'),
      resume_ms: Number.isFinite(resumed) ? resumed - killedAt : NaN,
      streams: o.streams,
      streams_completed: runs.filter((r) => r.done && r.error === undefined).length,
      texts_equal: runs.every((r, i) => r.done && r.error === undefined && r.text === reference[i]?.text),
    };
  } finally {
    await server.close(0);
    await sleep(0);
  }
}

export function table(r: RecoverBenchRow): string {
  return formatTable(
    ['detect ms', 'replace ms', 'resume ms', 'streams', 'completed', 'texts equal'],
    [
      [
        r.detect_ms.toFixed(0),
        r.replace_ms.toFixed(0),
        r.resume_ms.toFixed(0),
        String(r.streams),
        String(r.streams_completed),
        r.texts_equal ? 'yes' : 'NO',
      ],
    ],
  );
}
