// `tandem bench moe`: expert parallel on local nodes with the experts placed statically
// (contiguous id ranges), by a routing profile at load (each layer by its own routing, hot
// experts copied), or re-placed by the nodes' counters while loaded (dynamic); same prompt,
// one node's tokens as the reference.
import { benchCluster, benchPrompt, rebalanceExperts, type RebalanceReport } from '../src/cluster/index.js';
import { createKernels } from '../src/kernels/index.js';
import { configFromMetadata, GgufModelFile, Model } from '../src/engine/index.js';
import {
  checkProfile,
  contiguousLayers,
  expertSetsFromProfile,
  layersMaxNodeShare,
  placeByProfile,
  profileOfModel,
  type ExpertProfile,
} from '../src/parallel/index.js';
import { TandemError } from '../src/errors/index.js';
import { formatTable } from './table.js';

/**
 * static: contiguous id ranges; profile: each layer placed at load by the profile; dynamic:
 * loaded static, then re-placed by the nodes' own counters while loaded (the serving path).
 */
export type Balance = 'static' | 'profile' | 'dynamic';
export const balances: readonly Balance[] = ['static', 'profile', 'dynamic'];

export interface MoeBenchRow {
  balance: Balance;
  nodes: number;
  decode_tok_s: number;
  prefill_tok_s: number;
  /**
   * The busiest node's expected share of routed work over the mean, averaged over the layers,
   * from the measured routing and the placement the timed runs used.
   */
  max_node_share: number;
  /**
   * The busiest node's CPU time in its own experts during the prefill over the nodes' mean
   * (the best timed run), measured on the nodes; absent where they do not measure it.
   */
  expert_cpu_max_share?: number;
  /** Expert copies beyond one per expert, summed over the layers. */
  replicas: number;
  same_tokens: boolean;
}

/** Each layer's routing when one node prefills the prompt: the profile a placement follows. */
export async function expertProfile(model: string, prompt: readonly number[]): Promise<ExpertProfile> {
  const kernels = await createKernels({ threads: 1 });
  const file = GgufModelFile.open(model);
  try {
    const m = await Model.load(file, kernels);
    if (!m.expertLoad)
      throw new TandemError('PAR_BAD_PLAN', `bench moe: ${model} is not a mixture of experts`, {
        hint: 'make one with tandem make-model --arch qwen3moe --experts 16 --router-skew zipf:1.2',
      });
    await m.forward(prompt, m.newSession({ contextLength: prompt.length + 1 }));
    return profileOfModel(m);
  } finally {
    file.close();
    await kernels.close();
  }
}

/** Each expert's share of all layers' choices (the layers' mean). */
export function overallShares(p: ExpertProfile): number[] {
  return p.layers[0]!.map((_, e) => p.layers.reduce((a, l) => a + l[e]!, 0) / p.layers.length);
}

export async function benchMoe(o: {
  model: string;
  nodes: number;
  balances: readonly Balance[];
  promptTokens: number;
  tokens: number;
  repeat: number;
  /** The routing to place by (`profile`); default one node's pass over the prompt. */
  profile?: ExpertProfile;
  log: (line: string) => void;
}): Promise<{ rows: MoeBenchRow[]; profile: ExpertProfile }> {
  const file = GgufModelFile.open(o.model);
  const vocab = file.tensors.get('token_embd.weight')?.dims[1] ?? 2;
  const config = configFromMetadata(
    (k) => file.meta(k),
    new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
  );
  file.close();
  if (o.profile) checkProfile(o.profile, { experts: config.expertCount, layers: config.blockCount });
  let profile = o.profile;
  if (!profile) {
    o.log('profiling expert load on one node...');
    profile = await expertProfile(o.model, benchPrompt(o.promptTokens, vocab));
  }
  const measured = profile;
  const rows: MoeBenchRow[] = [];
  for (const balance of o.balances) {
    let placed = { share: 0, replicas: 0 };
    if (balance === 'static') placed.share = layersMaxNodeShare(contiguousLayers(measured.layers, o.nodes));
    if (balance === 'profile') {
      const layers = placeByProfile(measured, o.nodes);
      placed = {
        share: layersMaxNodeShare(layers),
        replicas: layers.reduce((a, p) => a + p.perRank.flat().length - p.copies.length, 0),
      };
    }
    let report: RebalanceReport | undefined;
    const [one, many] = await benchCluster({
      model: o.model,
      nodes: o.nodes,
      parallel: 'ep',
      provider: 'shm',
      promptTokens: o.promptTokens,
      tokens: o.tokens,
      repeat: o.repeat,
      ceiling: false,
      ...(balance === 'profile' ? { expertSets: expertSetsFromProfile(measured, o.nodes) } : {}),
      ...(balance === 'dynamic'
        ? {
            prepare: async (session, load, prompt) => {
              // the nodes count the prompt's routing, then re-place their experts by it
              await session.generate({ prompt, maxTokens: 1 });
              report = await rebalanceExperts(session, load, { margin: 0 });
              o.log(`dynamic: ${report.reason}`);
            },
          }
        : {}),
      onProgress: (l) => o.log(`${balance}: ${l}`),
    });
    if (report) placed = { share: report.after, replicas: report.replicas };
    o.log(
      `${balance}: one node in the same run (alternated, best of ${o.repeat}): prefill ${one!.prefill_tok_s.toFixed(1)} tok/s, decode ${one!.decode_tok_s.toFixed(1)} tok/s`,
    );
    rows.push({
      balance,
      nodes: o.nodes,
      decode_tok_s: many!.decode_tok_s,
      prefill_tok_s: many!.prefill_tok_s,
      max_node_share: placed.share,
      ...(many!.expert_cpu_max_share !== undefined
        ? { expert_cpu_max_share: many!.expert_cpu_max_share }
        : {}),
      replicas: placed.replicas,
      same_tokens: many!.same_tokens ?? false,
    });
  }
  return { rows, profile: measured };
}

/**
 * What a run on `nodes` local nodes of one thread each can show on a host of `cores` cores:
 * undefined when every node has a core; else why a balanced placement's gain is capped there.
 */
export function sharedCoresNote(nodes: number, cores: number): string | undefined {
  if (nodes <= cores) return undefined;
  return (
    `note: the ${nodes} nodes share ${cores} core(s) here, so the cores can set the pace rather than the busiest node: ` +
    `a balanced placement removes the waits on it but adds no cores; with --nodes ${cores} or fewer each node has a core of its own, as on separate machines`
  );
}

export function moeTable(rows: readonly MoeBenchRow[]): string {
  return formatTable(
    [
      'balance',
      'nodes',
      'prefill tok/s',
      'decode tok/s',
      'max node share',
      'measured (cpu)',
      'replicas',
      'same tokens',
    ],
    rows.map((r) => [
      r.balance,
      String(r.nodes),
      r.prefill_tok_s.toFixed(1),
      r.decode_tok_s.toFixed(1),
      `${r.max_node_share.toFixed(2)}x`,
      r.expert_cpu_max_share !== undefined ? `${r.expert_cpu_max_share.toFixed(2)}x` : '-',
      String(r.replicas),
      r.same_tokens ? 'yes' : 'NO',
    ]),
  );
}
