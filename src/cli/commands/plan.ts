import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { defineCommand } from '../options.js';
import { checkThreads } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import {
  bytesFromGguf,
  bytesFromShape,
  engineIds,
  findEngine,
  findLink,
  findModelShape,
  forecastAuto,
  forecastError,
  forecastSplit,
  formatBytes,
  linkCatalog,
  machineCatalog,
  modelCatalog,
  paramCounts,
  parseForecastMachines,
  parseQuant,
  quantBits,
  readLinkFile,
  type ForecastMachine,
  type ForecastParallel,
  type LinkSpec,
  type ModelBytes,
  validateForecasts,
  validationSummary,
} from '../../parallel/index.js';
import { macModels, parseMachines, planCabling } from '../../topology/index.js';
import { calibrate, calibrationPath, loadCalibration, saveCalibration } from '../../cluster/index.js';
import { formatPlanReport, planReport, type PlanReport } from './plan-format.js';

function usage(message: string, hint: string): TandemError {
  return new TandemError('CLI_USAGE', `plan: ${message}`, { hint });
}

/** A GGUF path (its header is read) or a catalog name with a quantization. */
function modelOf(
  given: string,
  quant: string | undefined,
): { bytes: ModelBytes; params: { total: number; active: number } } {
  if (given.endsWith('.gguf') || existsSync(given)) {
    if (quant !== undefined)
      throw usage('--quant applies to catalog models', 'drop --quant: a GGUF file counts its own types');
    const bytes = bytesFromGguf(given);
    return { bytes, params: { total: bytes.totalParams, active: bytes.activeParams } };
  }
  const shape = findModelShape(given);
  const p = paramCounts(shape);
  return {
    bytes: bytesFromShape(shape, parseQuant(quant ?? 'q4_k_m')),
    params: { total: p.total, active: p.active },
  };
}

/** The link named, or read from a file; by default Thunderbolt 5 RDMA where every machine has the ports, else 10 GbE. */
function linkOf(given: string | undefined, machines: readonly ForecastMachine[]): LinkSpec {
  if (given !== undefined) return existsSync(given) ? readLinkFile(given) : findLink(given);
  return findLink(machines.every((m) => m.spec.tb5Ports > 0) ? 'tb5-rdma' : '10gbe');
}

function cablesOf(machines: readonly ForecastMachine[], link: LinkSpec): PlanReport['cables'] {
  if (machines.length === 1) return 'none (one machine)';
  const macs = machines.every((m) => macModels.some((k) => k.id === m.spec.id && k.tb5Ports.length > 0));
  if (!link.id.startsWith('tb5') || !macs)
    return `one ${link.name} link per machine (a switch, or a ring of cables)`;
  try {
    return planCabling(parseMachines(machines.map((m) => m.spec.id).join(','))).cables;
  } catch (e) {
    return e instanceof TandemError ? e.message : String(e);
  }
}

function parseSweep(text: string): number[] {
  const m = /^nodes=(\d+)\.\.(\d+)$/.exec(text.trim());
  const lo = Number(m?.[1]);
  const hi = Number(m?.[2]);
  if (!m || lo < 1 || hi < lo || hi > 64)
    throw usage(`cannot read --sweep '${text}'`, 'write --sweep nodes=1..8 (1 to 64)');
  return Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
}

const listModels = (): string =>
  modelCatalog
    .map((m) => {
      const p = paramCounts(m);
      return `  ${m.id.padEnd(18)} ${(p.total / 1e9).toFixed(1).padStart(7)}B  ${(p.active / 1e9).toFixed(1).padStart(6)}B active  ${m.layers} layers${m.moe ? `, ${m.moe.experts} experts (${m.moe.active} active)` : ''}  ${m.source}`;
    })
    .join('\n');

const listMachines = (): string =>
  machineCatalog
    .map(
      (m) =>
        `  ${m.id.padEnd(22)} ${m.memory
          .map((c) => `${c.gb}g`)
          .join('/')
          .padEnd(18)} ${[...new Set(m.memory.map((c) => c.bandwidthGBs))]
          .map((b) => `${b.toFixed(0)} GB/s`)
          .join(' or ')
          .padEnd(
            20,
          )} ${m.gpuTflops ? `GPU ${m.gpuTflops} TFLOP/s` : 'CPU'.padEnd(16)}  TB5 ${m.tb5Ports}  ${m.name}`,
    )
    .join('\n');

function formatValidation(json: boolean): string {
  const rows = validateForecasts();
  if (json) return rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
  const lines = rows.map(
    (r) =>
      `  ${r.id.padEnd(30)} ${r.figure.replace('_tok_s', '').padEnd(8)} ${r.measured.toFixed(1).padStart(8)} ${r.predicted.toFixed(1).padStart(9)} ${`${r.error >= 0 ? '+' : ''}${(r.error * 100).toFixed(1)}%`.padStart(8)}${r.fitted ? '  (fitted)' : ''}`,
  );
  const s = (f: 'decode_tok_s' | 'prefill_tok_s'): string => {
    const v = validationSummary(rows, f);
    return `${f.replace('_tok_s', '')}: ${v.cases} cases, median |error| ${(v.median * 100).toFixed(1)}%, largest ${(v.max * 100).toFixed(1)}%`;
  };
  return (
    [
      `  ${'case'.padEnd(30)} ${'figure'.padEnd(8)} ${'measured'.padStart(8)} ${'predicted'.padStart(9)} ${'error'.padStart(8)}`,
      ...lines,
      s('decode_tok_s'),
      s('prefill_tok_s'),
      'sources and notes: docs/plan.md, or --validate --json',
    ].join('\n') + '\n'
  );
}

export const command = defineCommand({
  name: 'plan',
  summary: 'predict whether a model fits a set of machines, and its TTFT and tokens/s, before you buy',
  description:
    'A cost model of decode (weight bytes over memory bandwidth, per-layer engine costs, collectives over the link) and prefill (FLOPs over compute), ' +
    "fitted on published llama.cpp figures and on this machine's calibration; it gives a range, the bottleneck and the cables. " +
    'Catalog models are sized from their config.json and --quant; a GGUF file is sized from its header (no weights are read). ' +
    "'this' is the machine you run on, measured once by --calibrate. docs/plan.md has the terms, their sources and the validation.",
  options: {
    model: {
      type: 'string',
      description: 'a GGUF file, or a catalog name (--list-models)',
      placeholder: 'M',
    },
    machines: {
      type: 'string',
      description:
        'the machines, e.g. "3x macbook-pro-m4-max:64g, 1x mac-studio-m3-ultra:512g" (memory suffix optional: the smallest; --list-machines)',
      placeholder: 'list',
    },
    link: {
      type: 'string',
      description: `${linkCatalog.map((l) => l.id).join('|')}, or a JSON file {"latency_us","bandwidth_GBps"} (default: tb5-rdma where every machine has Thunderbolt 5, else 10gbe)`,
      placeholder: 'LINK',
    },
    parallel: {
      type: 'string',
      description: 'the split; auto tries each and keeps the fastest that fits',
      choices: ['tp', 'pp', 'ep', 'hybrid', 'auto'],
      default: 'auto',
    },
    quant: {
      type: 'string',
      description: `a catalog model's format: ${Object.keys(quantBits).join(', ')} (default q4_k_m)`,
      placeholder: 'Q',
    },
    'prompt-tokens': { type: 'number', description: 'prompt length for TTFT and prefill', default: 512 },
    context: { type: 'number', description: 'KV cache positions each machine holds room for', default: 8192 },
    engine: {
      type: 'string',
      description: "whose speed: tandem's or an engine people compare with",
      choices: engineIds,
      default: 'tandem-cpu',
    },
    sweep: {
      type: 'string',
      description: 'nodes=1..8: the same figures for 1..8 of the first machine listed',
      placeholder: 'nodes=A..B',
    },
    json: {
      type: 'boolean',
      description: 'print the forecast as JSON (one line per node count with --sweep)',
    },
    'list-models': { type: 'boolean', description: 'print the model catalog' },
    'list-machines': { type: 'boolean', description: 'print the machine catalog' },
    validate: {
      type: 'boolean',
      description: 'forecast the published cases (docs/plan.md) and print each beside its measured figure',
    },
    calibrate: {
      type: 'boolean',
      description:
        "measure this machine for 'this': the memory stream (8 samples: median and range), a matmul, and a layer's and a step's fixed costs (a narrow model at two depths)",
    },
    threads: { type: 'number', description: 'threads for --calibrate (default: all cores)' },
  },
  examples: [
    'tandem plan --model llama-3.3-70b --machines "3x macbook-pro-m4-max:64g" --link tb5-rdma',
    'tandem plan --model deepseek-v3 --quant q4_0 --machines "4x mac-studio-m3-ultra:512g" --engine mlx --json',
    'tandem plan --model qwen3-235b-a22b --machines mac-studio-m3-ultra:256g --sweep nodes=1..4',
    'tandem plan --calibrate && tandem plan --model model.gguf --machines this',
  ],
  async run({ options }) {
    if (options['list-models'] || options['list-machines']) {
      if (options.json)
        process.stdout.write(JSON.stringify(options['list-models'] ? modelCatalog : machineCatalog) + '\n');
      else process.stdout.write((options['list-models'] ? listModels() : listMachines()) + '\n');
      return 0;
    }
    if (options.validate) {
      process.stdout.write(formatValidation(options.json === true));
      return 0;
    }
    if (options.calibrate) {
      const threads = options.threads ?? availableParallelism();
      checkThreads('plan', threads);
      const c = await calibrate({ threads, log: (l) => process.stderr.write(`${l}\n`) });
      const gbs = (b: number): string => (b / 1e9).toFixed(2);
      await saveCalibration(c);
      process.stderr.write(
        `this machine: ${formatBytes(c.memoryBytes)}, decode streams ${gbs(c.decodeBytesPerS)} GB/s ` +
          `(median of ${c.streamSamples?.length ?? 1} samples, ${c.decodeBytesPerSRange?.map(gbs).join('-') ?? '?'} GB/s, ` +
          `${Math.round((c.fastShare ?? 1) * 100)}% in the fast mode; a model's layers at ${(c.decodeLayerShare ?? 1).toFixed(2)} of it ` +
          `at TinyLlama's shapes), prefill GEMMs ${(c.prefillFlopsPerS / 1e9).toFixed(1)} GFLOP/s, ` +
          `${c.layerOverheadMs.toFixed(3)} ms a layer and ${(c.stepOverheadMs ?? 0).toFixed(3)} ms a step beyond the weights, ` +
          `prefill attention ${((c.prefillAttentionFlopsPerS ?? 0) / 1e9).toFixed(1)} GFLOP/s and ` +
          `${(c.prefillLayerTokenMs ?? 0).toFixed(4)} ms a layer per prompt token beside the GEMMs` +
          (c.prefillThreadScaling === undefined
            ? ''
            : ` (the prefill probe's speedup on ${threads} threads over 1: ${c.prefillThreadScaling.toFixed(2)}x)`) +
          `; saved to ${calibrationPath()}\n`,
      );
      if (!options.model) return 0;
    }
    if (!options.model || !options.machines)
      throw usage(
        '--model and --machines are needed',
        'e.g. tandem plan --model llama-3.1-8b --machines "2x mac-mini-m4-pro"',
      );
    if (!(options['prompt-tokens'] >= 1) || !(options.context >= options['prompt-tokens']))
      throw usage(
        '--prompt-tokens must be >= 1 and --context at least as large',
        'e.g. --prompt-tokens 512 --context 8192',
      );
    const { bytes, params } = modelOf(options.model, options.quant);
    const calibration = loadCalibration();
    const listed = parseForecastMachines(options.machines, calibration);
    const engine = findEngine(options.engine);
    const counts = options.sweep ? parseSweep(options.sweep) : [listed.length];
    const reports = counts.map((n) => {
      const machines = options.sweep
        ? parseForecastMachines(`${n}x ${listed[0]!.spec.id}:${listed[0]!.memory.gb}g`, calibration)
        : listed;
      const link = linkOf(options.link, machines);
      const input = {
        model: bytes,
        machines,
        link,
        engine,
        promptTokens: options['prompt-tokens'],
        context: options.context,
      };
      const auto = options.parallel === 'auto' ? forecastAuto(input) : undefined;
      const f = auto?.best ?? forecastSplit({ ...input, parallel: options.parallel as ForecastParallel });
      return planReport(f, {
        modelName: bytes.name,
        modelSource: bytes.source,
        params,
        machines,
        link,
        engine,
        error: forecastError(engine, machines.length),
        alternatives: auto?.all ?? [f],
        cables: cablesOf(machines, link),
      });
    });
    if (options.json) {
      for (const r of reports) process.stdout.write(JSON.stringify(r) + '\n');
      return 0;
    }
    if (!options.sweep) {
      process.stdout.write(formatPlanReport(reports[0]!, options['prompt-tokens'], bytes.layers.length));
      return 0;
    }
    const rows = reports.map(
      (r) =>
        `  ${String(r.machines.length).padStart(5)}  ${r.parallel.padEnd(6)} ${(r.fits ? 'yes' : 'no').padEnd(4)} ${r.decode_tok_s.toFixed(1).padStart(9)} ${r.prefill_tok_s.toFixed(0).padStart(9)} ${r.ttft_ms.toFixed(0).padStart(9)}  ${r.bottleneck}`,
    );
    process.stdout.write(
      [
        `${bytes.name} on 1..${counts[counts.length - 1]} x ${listed[0]!.spec.id}:${listed[0]!.memory.gb}g, engine ${engine.id} (+-${Math.round(reports[reports.length - 1]!.range.error * 100)}%)`,
        `  nodes  split  fits  decode/s prefill/s   TTFT ms  bottleneck`,
        ...rows,
      ].join('\n') + '\n',
    );
    return 0;
  },
});
