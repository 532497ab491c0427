import type { ProviderName } from '../fabric/index.js';
import type { ParallelKind, WireFormat } from '../parallel/index.js';
import { launchLocalNodes } from './launcher.js';
import { ClusterSession, type ClusterResult } from './session.js';

export interface BenchClusterOptions {
  model: string;
  nodes: number;
  parallel: ParallelKind;
  provider: ProviderName;
  wire?: WireFormat;
  tpSize?: number;
  /** Prompt length (default 128) and decoded tokens (default 32). */
  promptTokens?: number;
  tokens?: number;
  /** Threads per node (default 1). */
  threads?: number;
  /**
   * Timed generations per configuration (default 3): each figure is the best of them
   * (highest tokens/s, lowest TTFT), as a machine shared with other work only ever slows a run.
   */
  repeat?: number;
  /** Teacher-forced steps for top-1 agreement with one node (default 256 when the wire is not f32, else 0). */
  agreementSteps?: number;
  onProgress?: (line: string) => void;
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
}

/** A fixed prompt of ids spread over the vocabulary (no tokenizer needed). */
export function benchPrompt(n: number, vocab: number): number[] {
  return Array.from({ length: n }, (_, i) => 1 + ((i * 7919 + 13) % (vocab - 1)));
}

async function measure(
  session: ClusterSession,
  prompt: number[],
  tokens: number,
  repeat: number,
): Promise<ClusterResult> {
  // Warm-up: compiles the hot paths on every node before the timed runs.
  await session.generate({ prompt: prompt.slice(0, 8), maxTokens: 4 });
  let best = await session.generate({ prompt, maxTokens: tokens });
  for (let i = 1; i < repeat; i++) {
    const r = await session.generate({ prompt, maxTokens: tokens });
    best = {
      ...best,
      ttftMs: Math.min(best.ttftMs, r.ttftMs),
      prefillTokS: Math.max(best.prefillTokS, r.prefillTokS),
      decodeTokS: Math.max(best.decodeTokS, r.decodeTokS),
      // comm share and bytes of the run with the best decode
      nodes: r.decodeTokS > best.decodeTokS ? r.nodes : best.nodes,
    };
  }
  return best;
}

/**
 * Runs the same prompt on one node and on `nodes` nodes (local processes, `threads` each)
 * and returns both rows, the second with its speedups over the first.
 */
export async function benchCluster(o: BenchClusterOptions): Promise<BenchClusterRow[]> {
  const progress = o.onProgress ?? (() => {});
  const secret = `bench-${process.pid}-${Date.now()}`;
  const wire = o.wire ?? 'f32';
  const promptTokens = o.promptTokens ?? 128;
  const tokens = o.tokens ?? 32;
  const agreementSteps = o.agreementSteps ?? (wire === 'f32' ? 0 : 256);
  progress(`starting ${o.nodes} local node(s), ${o.threads ?? 1} thread(s) each`);
  const local = await launchLocalNodes(o.nodes, { secret, threads: o.threads ?? 1, once: false });
  const rows: BenchClusterRow[] = [];
  try {
    const hosts = local.addresses.map((address) => ({ address }));
    const runOn = async (
      n: number,
    ): Promise<{ result: ClusterResult; agreement?: number; reference?: number[] }> => {
      const session = await ClusterSession.connect(hosts.slice(0, n), secret);
      try {
        progress(
          `loading ${o.model} on ${n} node(s)${n > 1 ? `: --parallel ${o.parallel} over ${o.provider}, wire ${wire}` : ''}`,
        );
        const placement = await session.load({
          model: o.model,
          parallel: n > 1 ? o.parallel : 'tp',
          provider: o.provider,
          greedy: true,
          wire: n > 1 ? wire : 'f32',
          ...(o.tpSize ? { tpSize: o.tpSize } : {}),
          contextLength: promptTokens + Math.max(tokens, agreementSteps) + 8,
        });
        const vocab = placement.plan.ranks[placement.plan.ranks.length - 1]!.shard.vocab.end;
        const prompt = benchPrompt(promptTokens, vocab);
        progress(
          `running ${promptTokens} prompt + ${tokens} decoded tokens on ${n} node(s), best of ${Math.max(1, o.repeat ?? 3)}`,
        );
        const result = await measure(session, prompt, tokens, Math.max(1, o.repeat ?? 3));
        if (agreementSteps === 0) return { result };
        if (n === 1)
          return {
            result,
            reference: (await session.generate({ prompt, maxTokens: agreementSteps })).tokens,
          };
        return { result, reference: [] };
      } finally {
        session.close();
      }
    };
    const one = await runOn(1);
    const many = await runOn(o.nodes);
    let agreement: number | undefined;
    if (agreementSteps > 0 && one.reference) {
      const session = await ClusterSession.connect(hosts, secret);
      try {
        progress(`measuring top-1 agreement over ${agreementSteps} teacher-forced steps (wire ${wire})`);
        const placement = await session.load({
          model: o.model,
          parallel: o.parallel,
          provider: o.provider,
          greedy: true,
          wire,
          ...(o.tpSize ? { tpSize: o.tpSize } : {}),
          contextLength: promptTokens + agreementSteps + 8,
        });
        const vocab = placement.plan.ranks[placement.plan.ranks.length - 1]!.shard.vocab.end;
        const forced = one.reference;
        const r = await session.generate({
          prompt: benchPrompt(promptTokens, vocab),
          maxTokens: agreementSteps,
          forced,
        });
        const predicted = r.predicted ?? [];
        agreement = predicted.filter((t, i) => t === forced[i]).length / forced.length;
      } finally {
        session.close();
      }
    }
    const row = (n: number, r: ClusterResult, base: ClusterResult): BenchClusterRow => ({
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
    });
    rows.push(row(1, one.result, one.result), row(o.nodes, many.result, one.result));
  } catch (e) {
    throw await local.explain(e);
  } finally {
    await local.stop();
  }
  return rows;
}
