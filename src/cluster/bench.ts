import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { TandemError } from '../errors/index.js';
import type { ProviderName } from '../fabric/index.js';
import type { KernelsChoice } from '../kernels/webgpu/index.js';
import type { ExpertSets, ParallelKind, RankMetrics, WireFormat } from '../parallel/index.js';
import { joulesPerToken, type PowerMeter } from '../util/power/index.js';
import type { HostEntry } from './hostfile.js';
import { launchLocalNodes, type LocalNodes } from './launcher.js';
import { resolveModelPath } from './model-path.js';
import { busyLine } from './protocol.js';
import { ClusterSession, NODES_CONNECT_MS, type ClusterResult, type LoadOptions } from './session.js';
import { STREAM_PROBE_MAX_BYTES, STREAM_PROBE_MIN_BYTES } from './speed.js';

/** How long each node streams weights for the ceiling, per round. */
const CEILING_PROBE_MS = 500;

export interface BenchClusterOptions {
  model: string;
  nodes: number;
  /**
   * Nodes started with `tandem node` instead of local processes: the first `nodes` hold the
   * split and the next one runs the single-node reference (so at least nodes + 1 entries).
   */
  hosts?: readonly HostEntry[];
  /** With `hosts`: the cluster secret they were started with (local nodes get a random one). */
  secret?: string;
  parallel: ParallelKind;
  provider: ProviderName;
  wire?: WireFormat;
  tpSize?: number;
  /** ep: each node's experts (balanceExperts); default contiguous ranges. */
  expertSets?: ExpertSets;
  /** Prompt length (default 128) and decoded tokens (default 32). */
  promptTokens?: number;
  tokens?: number;
  /** Threads per node (default 1). */
  threads?: number;
  /** Local nodes' kernels, the single-node reference's too (`tandem node --kernels`; webgpu: shards on the GPU). */
  kernels?: KernelsChoice;
  /**
   * Timed generations per configuration (default 3): each figure is the best of them
   * (highest tokens/s, lowest TTFT), as a machine shared with other work only ever slows a run.
   */
  repeat?: number;
  /** Teacher-forced steps for top-1 agreement with one node (default 256 when the wire is not f32, else 0). */
  agreementSteps?: number;
  /**
   * Token ids to teacher-force the agreement on (a text's tokens, prompt first): both runs are
   * fed `promptTokens` of them as the prompt and the next `agreementSteps` one by one, and their
   * greedy picks are compared step by step. Without it, the prompt is benchPrompt's and both
   * are fed one node's own greedy tokens.
   */
  agreementText?: readonly number[];
  /**
   * Tensor parallel only: also measure the decode speedup the machine allows with free communication
   * (default true; see BenchClusterRow.decode_ceiling). A few seconds per repeat.
   */
  ceiling?: boolean;
  /**
   * Where given, each row's j_per_token: the machine's joules per generated token over the
   * timed runs (the local nodes all run on this machine, so its meter covers them all).
   */
  power?: PowerMeter;
  /**
   * Runs on the N-node session after its warm-up, before the timed runs (bench moe: experts
   * re-placed by the nodes' counters while loaded), with the options it was loaded with.
   */
  prepare?: (session: ClusterSession, load: LoadOptions, prompt: readonly number[]) => Promise<void>;
  onProgress?: (line: string) => void;
}

/** The busiest node's expert CPU over the mean, where every node measured it and some ran experts. */
function expertSpread(nodes: readonly RankMetrics[]): { expert_cpu_max_share?: number } {
  const ms = nodes.map((m) => m.prefillExpertCpuMs);
  if (ms.length < 2 || ms.some((v) => v === undefined)) return {};
  const mean = (ms as number[]).reduce((a, b) => a + b, 0) / ms.length;
  return mean > 0 ? { expert_cpu_max_share: Math.max(...(ms as number[])) / mean } : {};
}

/** One row of `tandem bench cluster` (snake_case keys are the JSON line). */
export interface BenchClusterRow {
  nodes: number;
  parallel: ParallelKind;
  provider: ProviderName;
  wire: WireFormat;
  prefill_tok_s: number;
  decode_tok_s: number;
  ttft_ms: number;
  comm_share: number;
  wire_bytes_per_token: number;
  speedup_decode: number;
  speedup_ttft: number;
  /** Share of teacher-forced steps whose greedy pick matches one node's (when measured). */
  agreement?: number;
  /**
   * N-node row: whether every timed run generated one node's tokens exactly (greedy; see
   * docs/parallel.md, "Exact tensor parallel", for the splits that guarantee it).
   */
  same_tokens?: boolean;
  /**
   * The decode speedup the machine allows (tensor parallel, N-node row): the time one
   * node takes to stream the model's bytes through its Q8_0 matvec, over the time the
   * slowest of N nodes takes to stream its 1/N share while all N stream at once, measured
   * in the same run, alternated and best of --repeat rounds each (local nodes share one
   * machine's memory and cores; the matvec is bound by one or the other).
   */
  decode_ceiling?: number;
  /**
   * Expert parallel, N-node row: the busiest node's CPU time in its own experts during the
   * best run's prefill, over the nodes' mean (1: an even spread). Measured on each node,
   * where max_node_share in `bench moe` is expected from the routing.
   */
  expert_cpu_max_share?: number;
  /** The machine's joules per generated token, lowest over the timed runs (with a power meter). */
  j_per_token?: number;
}

/** A fixed prompt of ids spread over the vocabulary (no tokenizer needed). */
export function benchPrompt(n: number, vocab: number): number[] {
  return Array.from({ length: n }, (_, i) => 1 + ((i * 7919 + 13) % (vocab - 1)));
}

/** The better of two results: highest tokens/s, lowest TTFT; comm share and bytes of the better decode. */
function best(a: ClusterResult | undefined, r: ClusterResult): ClusterResult {
  if (a === undefined) return r;
  return {
    ...a,
    ttftMs: Math.min(a.ttftMs, r.ttftMs),
    prefillTokS: Math.max(a.prefillTokS, r.prefillTokS),
    decodeTokS: Math.max(a.decodeTokS, r.decodeTokS),
    nodes: r.decodeTokS > a.decodeTokS ? r.nodes : a.nodes,
  };
}

/**
 * Runs the same prompt on one node and on `nodes` nodes (local processes, `threads` each)
 * and returns both rows, the second with its speedups over the first.
 *
 * The single-node reference runs in a node process of its own (N + 1 processes), loaded
 * side by side with the N-node split, and the timed runs alternate between the two. On a
 * machine whose speed drifts (a shared VM), both figures then come from the same minutes:
 * run one after the other, a drift between them went straight into the speedup.
 */
export async function benchCluster(o: BenchClusterOptions): Promise<BenchClusterRow[]> {
  const progress = o.onProgress ?? (() => {});
  const model = resolveModelPath(o.model);
  const wire = o.wire ?? 'f32';
  const promptTokens = o.promptTokens ?? 128;
  const tokens = o.tokens ?? 32;
  const repeat = Math.max(1, o.repeat ?? 3);
  const agreementSteps = o.agreementSteps ?? (wire === 'f32' ? 0 : 256);
  const textNeeded = promptTokens + agreementSteps;
  if (o.agreementText !== undefined && agreementSteps > 0 && o.agreementText.length < textNeeded) {
    throw new TandemError(
      'INVALID_ARGUMENT',
      `the agreement text has ${o.agreementText.length} tokens; ${promptTokens} prompt tokens and ${agreementSteps} steps need ${textNeeded}`,
      { hint: 'give a longer text, or lower --prompt-tokens or --agreement' },
    );
  }
  if (o.hosts !== undefined && o.hosts.length < o.nodes + 1) {
    throw new TandemError(
      'CLUSTER_BAD_HOSTFILE',
      `bench cluster --nodes ${o.nodes} needs ${o.nodes + 1} hosts (the split and a single-node reference), the hostfile lists ${o.hosts.length}`,
      { hint: `add a node to the hostfile, or lower --nodes to ${Math.max(1, o.hosts.length - 1)}` },
    );
  }
  if (o.hosts !== undefined && o.secret === undefined)
    throw new TandemError('CLI_USAGE', 'bench cluster on listed hosts needs the cluster secret', {
      hint: 'pass --secret-file FILE or set TANDEM_SECRET to the secret the nodes were started with',
    });
  const secret = o.secret ?? randomBytes(16).toString('hex');
  let local: LocalNodes | undefined;
  let hosts: readonly HostEntry[];
  if (o.hosts !== undefined) {
    hosts = o.hosts.slice(0, o.nodes + 1);
  } else {
    progress(
      `starting ${o.nodes} local node(s) and a single-node reference, ${o.threads ?? 1} thread(s) each`,
    );
    local = await launchLocalNodes(o.nodes + 1, {
      secret,
      threads: o.threads ?? 1,
      once: false,
      ...(o.kernels ? { kernels: o.kernels } : {}),
    });
    hosts = local.addresses.map((address) => ({ address }));
  }
  const sessions: ClusterSession[] = [];
  try {
    const open = async (n: number): Promise<{ session: ClusterSession; prompt: number[] }> => {
      const session = await ClusterSession.connect(
        n === 1 ? hosts.slice(o.nodes) : hosts.slice(0, n),
        secret,
        NODES_CONNECT_MS,
        (b) => progress(busyLine(b, NODES_CONNECT_MS)),
      );
      sessions.push(session);
      progress(
        `loading ${model} on ${n} node(s)${n > 1 ? `: --parallel ${o.parallel} over ${o.provider}, wire ${wire}` : ''}`,
      );
      const load: LoadOptions = {
        model,
        parallel: n > 1 ? o.parallel : 'tp',
        provider: o.provider,
        greedy: true,
        wire: n > 1 ? wire : 'f32',
        ...(o.tpSize ? { tpSize: o.tpSize } : {}),
        ...(n > 1 && o.expertSets ? { expertSets: o.expertSets } : {}),
        contextLength: promptTokens + Math.max(tokens, agreementSteps) + 8,
      };
      const placement = await session.load(load);
      const vocab = placement.plan.ranks[placement.plan.ranks.length - 1]!.shard.vocab.end;
      const prompt = benchPrompt(promptTokens, vocab);
      // Warm-up: compiles the hot paths on every node before the timed runs.
      await session.generate({ prompt: prompt.slice(0, 8), maxTokens: 4 });
      if (n > 1 && o.prepare) await o.prepare(session, load, prompt);
      return { session, prompt };
    };
    const one = await open(1);
    const many = await open(o.nodes);
    let oneBest: ClusterResult | undefined;
    let manyBest: ClusterResult | undefined;
    let sameTokens = true;
    const joules = { one: Infinity, many: Infinity };
    const metered = async (
      key: 'one' | 'many',
      run: () => Promise<ClusterResult>,
    ): Promise<ClusterResult> => {
      const meter = o.power;
      const before = meter?.joules();
      const r = await run();
      if (meter && before !== undefined) {
        const j = joulesPerToken(meter.joules() - before, r.tokens.length);
        if (j !== undefined) joules[key] = Math.min(joules[key], j);
      }
      return r;
    };
    for (let i = 0; i < repeat; i++) {
      progress(
        `run ${i + 1} of ${repeat}: ${promptTokens} prompt + ${tokens} decoded tokens on 1 node, then on ${o.nodes}`,
      );
      const a = await metered('one', () => one.session.generate({ prompt: one.prompt, maxTokens: tokens }));
      const b = await metered('many', () =>
        many.session.generate({ prompt: many.prompt, maxTokens: tokens }),
      );
      sameTokens &&= a.tokens.length === b.tokens.length && a.tokens.every((t, j) => t === b.tokens[j]);
      oneBest = best(oneBest, a);
      manyBest = best(manyBest, b);
    }
    let ceiling: number | undefined;
    if (o.ceiling !== false && o.parallel === 'tp' && o.nodes > 1) {
      // alternated like the timed runs, best of each, as the machine's speed drifts
      const bytes = Math.min(
        STREAM_PROBE_MAX_BYTES,
        Math.max(STREAM_PROBE_MIN_BYTES * o.nodes, statSync(model).size),
      );
      const mb = (b: number): string => `${(b / 1e6).toFixed(0)} MB`;
      const gbs = (r: number): string => `${(r / 1e9).toFixed(1)} GB/s`;
      let alone = 0;
      let together = 0;
      for (let i = 0; i < repeat; i++) {
        progress(
          `memory ceiling ${i + 1} of ${repeat}: a Q8_0 matvec over ${mb(bytes)} on 1 node, then over ${mb(bytes / o.nodes)} on each of ${o.nodes} at once`,
        );
        const [a] = await one.session.streamRates(bytes, CEILING_PROBE_MS);
        const t = await many.session.streamRates(Math.round(bytes / o.nodes), CEILING_PROBE_MS);
        progress(`  1 node ${gbs(a as number)}; ${o.nodes} at once ${t.map(gbs).join(', ')}`);
        alone = Math.max(alone, a as number);
        together = Math.max(together, Math.min(...t));
      }
      ceiling = (o.nodes * together) / alone;
    }
    let agreement: number | undefined;
    if (agreementSteps > 0) {
      const text = o.agreementText;
      progress(
        `measuring top-1 agreement over ${agreementSteps} teacher-forced steps (wire ${wire}) on ${text ? 'the given text' : "one node's greedy tokens"}`,
      );
      const prompt = text ? text.slice(0, promptTokens) : one.prompt;
      // one node's picks: fed its own greedy tokens, they are those tokens
      const forced = text
        ? text.slice(promptTokens, promptTokens + agreementSteps)
        : (await one.session.generate({ prompt, maxTokens: agreementSteps })).tokens;
      const reference = text
        ? ((await one.session.generate({ prompt, maxTokens: forced.length, forced })).predicted ?? [])
        : forced;
      const predicted =
        (await many.session.generate({ prompt, maxTokens: forced.length, forced })).predicted ?? [];
      agreement = predicted.filter((t, i) => t === reference[i]).length / reference.length;
    }
    const row = (n: number, r: ClusterResult, base: ClusterResult, j: number): BenchClusterRow => ({
      nodes: n,
      parallel: o.parallel,
      provider: o.provider,
      wire: n > 1 ? wire : 'f32',
      prefill_tok_s: r.prefillTokS,
      decode_tok_s: r.decodeTokS,
      ttft_ms: r.ttftMs,
      comm_share: r.nodes.reduce((a, m) => a + m.commShare, 0) / r.nodes.length,
      wire_bytes_per_token: Math.max(...r.nodes.map((m) => m.wireBytesPerToken)),
      speedup_decode: r.decodeTokS / base.decodeTokS,
      speedup_ttft: base.ttftMs / r.ttftMs,
      ...(n > 1 && agreement !== undefined ? { agreement } : {}),
      ...(n > 1 ? { same_tokens: sameTokens } : {}),
      ...(n > 1 && ceiling !== undefined ? { decode_ceiling: ceiling } : {}),
      ...(n > 1 ? expertSpread(r.nodes) : {}),
      ...(Number.isFinite(j) ? { j_per_token: j } : {}),
    });
    return [row(1, oneBest!, oneBest!, joules.one), row(o.nodes, manyBest!, oneBest!, joules.many)];
  } catch (e) {
    throw local ? await local.explain(e) : e;
  } finally {
    for (const s of sessions) s.close();
    await local?.stop();
  }
}
