// `tandem bench moe`: expert parallel on local nodes with the experts placed statically
// (contiguous id ranges) or by load (a profile of the prompt on one node, hot experts copied),
// same prompt, one node's tokens as the reference.
import { benchCluster, benchPrompt } from '../src/cluster/bench.js';
import { createKernels } from '../src/kernels/index.js';
import { GgufModelFile, Model } from '../src/engine/index.js';
import { balanceExperts, contiguousExperts, maxNodeShare } from '../src/parallel/index.js';
import { TandemError } from '../src/errors/index.js';
import { formatTable } from './table.js';

export type Balance = 'static' | 'dynamic';

export interface MoeBenchRow {
  balance: Balance;
  nodes: number;
  decode_tok_s: number;
  prefill_tok_s: number;
  /** The busiest node's expected share of routed work over the mean, from the measured profile and the placement. */
  max_node_share: number;
  /** Expert copies beyond one per expert. */
  replicas: number;
  same_tokens: boolean;
}

/** Tokens routed to each expert (all layers) when one node prefills the prompt: the profile a placement follows. */
export async function expertProfile(model: string, prompt: readonly number[]): Promise<number[]> {
  const kernels = await createKernels({ threads: 1 });
  const file = GgufModelFile.open(model);
  try {
    const m = await Model.load(file, kernels);
    if (!m.expertLoad)
      throw new TandemError('PAR_BAD_PLAN', `bench moe: ${model} is not a mixture of experts`, {
        hint: 'make one with tandem make-model --arch qwen3moe --experts 16 --router-skew zipf:1.2',
      });
    await m.forward(prompt, m.newSession({ contextLength: prompt.length + 1 }));
    return m.expertLoad.shares();
  } finally {
    file.close();
    await kernels.close();
  }
}

export async function benchMoe(o: {
  model: string;
  nodes: number;
  balances: readonly Balance[];
  promptTokens: number;
  tokens: number;
  repeat: number;
  log: (line: string) => void;
}): Promise<{ rows: MoeBenchRow[]; profile: number[] }> {
  const file = GgufModelFile.open(o.model);
  const vocab = file.tensors.get('token_embd.weight')?.dims[1] ?? 2;
  file.close();
  o.log('profiling expert load on one node...');
  const profile = await expertProfile(o.model, benchPrompt(o.promptTokens, vocab));
  const rows: MoeBenchRow[] = [];
  for (const balance of o.balances) {
    const placement =
      balance === 'static'
        ? contiguousExperts(profile, o.nodes)
        : balanceExperts(profile, o.nodes, Math.ceil(profile.length / o.nodes) + 2);
    const [, many] = await benchCluster({
      model: o.model,
      nodes: o.nodes,
      parallel: 'ep',
      provider: 'shm',
      promptTokens: o.promptTokens,
      tokens: o.tokens,
      repeat: o.repeat,
      ceiling: false,
      ...(balance === 'dynamic' ? { expertSets: placement.perRank } : {}),
      onProgress: (l) => o.log(`${balance}: ${l}`),
    });
    rows.push({
      balance,
      nodes: o.nodes,
      decode_tok_s: many!.decode_tok_s,
      prefill_tok_s: many!.prefill_tok_s,
      max_node_share: maxNodeShare(placement),
      replicas: placement.perRank.flat().length - profile.length,
      same_tokens: many!.same_tokens ?? false,
    });
  }
  return { rows, profile };
}

export function moeTable(rows: readonly MoeBenchRow[]): string {
  return formatTable(
    ['balance', 'nodes', 'prefill tok/s', 'decode tok/s', 'max node share', 'replicas', 'same tokens'],
    rows.map((r) => [
      r.balance,
      String(r.nodes),
      r.prefill_tok_s.toFixed(1),
      r.decode_tok_s.toFixed(1),
      `${r.max_node_share.toFixed(2)}x`,
      String(r.replicas),
      r.same_tokens ? 'yes' : 'NO',
    ]),
  );
}
