import { formatBytes, type Forecast, type ForecastMachine, type LinkSpec } from '../../parallel/index.js';

/** Everything one `tandem plan` answer says, as `--json` prints it. */
export interface PlanReport {
  model: string;
  model_source: string;
  params: { total: number; active: number };
  machines: string[];
  link: { id: string; latency_us: number; bandwidth_GBps: number };
  engine: string;
  engine_basis: string;
  fits: boolean;
  parallel: string;
  /** Each split tried and its decode estimate (auto). */
  alternatives: { parallel: string; fits: boolean; decode_tok_s: number }[];
  placement: Forecast['placement'];
  ttft_ms: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  /** Lower and upper ends: the figure -/+ the stated error. */
  range: {
    error: number;
    decode_tok_s: [number, number];
    prefill_tok_s: [number, number];
    ttft_ms: [number, number];
  };
  bottleneck: Forecast['bottleneck'];
  terms: Forecast['terms'];
  per_machine: Forecast['per_machine'];
  cables: { a: string; a_port: string; b: string; b_port: string }[] | string;
}

const band = (v: number, e: number): [number, number] => [v * (1 - e), v * (1 + e)];

export function planReport(
  f: Forecast,
  o: {
    modelName: string;
    modelSource: string;
    params: { total: number; active: number };
    machines: readonly ForecastMachine[];
    link: LinkSpec;
    engine: { id: string; basis: string };
    error: number;
    alternatives: Forecast[];
    cables: PlanReport['cables'];
  },
): PlanReport {
  return {
    model: o.modelName,
    model_source: o.modelSource,
    params: o.params,
    machines: o.machines.map((m) => `${m.spec.id}:${m.memory.gb}g`),
    link: { id: o.link.id, latency_us: o.link.latencyUs, bandwidth_GBps: o.link.bandwidthGBs },
    engine: o.engine.id,
    engine_basis: o.engine.basis,
    fits: f.fits,
    parallel: f.parallel,
    alternatives: o.alternatives.map((a) => ({
      parallel: a.parallel,
      fits: a.fits,
      decode_tok_s: a.decode_tok_s,
    })),
    placement: f.placement,
    ttft_ms: f.ttft_ms,
    prefill_tok_s: f.prefill_tok_s,
    decode_tok_s: f.decode_tok_s,
    range: {
      error: o.error,
      decode_tok_s: band(f.decode_tok_s, o.error),
      prefill_tok_s: band(f.prefill_tok_s, o.error),
      ttft_ms: band(f.ttft_ms, o.error),
    },
    bottleneck: f.bottleneck,
    terms: f.terms,
    per_machine: f.per_machine,
    cables: o.cables,
  };
}

const fmt = (v: number, digits = 1): string => (v >= 100 ? v.toFixed(0) : v.toFixed(digits));
const gb = (b: number): string => formatBytes(Math.max(0, b));

function placementLine(p: Forecast['placement'][number], layers: number): string {
  const parts = [
    `layers ${p.layers[0]}-${p.layers[1] - 1}${p.layers[1] - p.layers[0] === layers ? ' (all)' : ''}`,
  ];
  if (p.tensorShare < 1) parts.push(`1/${Math.round(1 / p.tensorShare)} of each layer's heads and FFN`);
  if (p.expertShare < 1) parts.push(`1/${Math.round(1 / p.expertShare)} of the experts`);
  return `  ${p.machine.padEnd(28)} ${parts.join(', ')}`;
}

export function formatPlanReport(r: PlanReport, promptTokens: number, layers: number): string {
  const lines = [
    `${r.model} (${fmt(r.params.total / 1e9)}B parameters, ${fmt(r.params.active / 1e9)}B read per token) on ${r.machines.length} machine(s) over ${r.link.id}, engine ${r.engine}`,
    `split: ${r.parallel}${r.alternatives.length > 1 ? `  (${r.alternatives.map((a) => `${a.parallel} ${fmt(a.decode_tok_s)} tok/s${a.fits ? '' : ' does not fit'}`).join(', ')})` : ''}`,
    `fits: ${r.fits ? 'yes' : 'NO'}`,
    '',
    `  ${'machine'.padEnd(28)} ${'usable'.padStart(10)} ${'weights'.padStart(10)} ${'KV cache'.padStart(10)} ${'buffers'.padStart(10)} ${'headroom'.padStart(10)}`,
  ];
  for (const m of r.per_machine)
    lines.push(
      `  ${m.name.padEnd(28)} ${gb(m.usable_bytes).padStart(10)} ${gb(m.weights_bytes).padStart(10)} ${gb(m.kv_bytes).padStart(10)} ${gb(m.activation_bytes).padStart(10)} ${(m.headroom_bytes < 0 ? `-${gb(-m.headroom_bytes)}` : gb(m.headroom_bytes)).padStart(10)}${m.fits ? '' : '  does not fit'}`,
    );
  lines.push('', 'placement:', ...r.placement.map((p) => placementLine(p, layers)), '');
  const e = Math.round(r.range.error * 100);
  lines.push(
    `predicted (+-${e}%, the model's stated error; docs/plan.md):`,
    `  decode   ${fmt(r.decode_tok_s).padStart(8)} tok/s   (${fmt(r.range.decode_tok_s[0])} - ${fmt(r.range.decode_tok_s[1])})`,
    `  prefill  ${fmt(r.prefill_tok_s).padStart(8)} tok/s   (${fmt(r.range.prefill_tok_s[0])} - ${fmt(r.range.prefill_tok_s[1])})`,
    `  TTFT     ${fmt(r.ttft_ms).padStart(8)} ms      for ${promptTokens} prompt tokens (${fmt(r.range.ttft_ms[0])} - ${fmt(r.range.ttft_ms[1])})`,
    `bottleneck: ${r.bottleneck} (per token: weight reads ${fmt(r.terms.read_ms, 2)} ms, per-layer overhead ${fmt(r.terms.overhead_ms, 2)} ms, link latency ${fmt(r.terms.link_latency_ms, 2)} ms, link bytes ${fmt(r.terms.link_bytes_ms, 2)} ms)`,
  );
  if (typeof r.cables === 'string') lines.push(`cables: ${r.cables}`);
  else {
    lines.push('cables (Thunderbolt 5, port by port; `tandem topology plan` explains):');
    r.cables.forEach((c, i) =>
      lines.push(`  ${String(i + 1).padStart(2)}. ${c.a} ${c.a_port} <-> ${c.b} ${c.b_port}`),
    );
  }
  lines.push(`basis: ${r.engine_basis}`);
  return lines.join('\n') + '\n';
}
