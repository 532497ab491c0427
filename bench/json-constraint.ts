// What a JSON schema constraint costs a decode step: greedy generation of --tokens tokens from
// the same prompt, without and with a schema (at least 8 objects with a string of at most 12
// characters, an integer and a boolean each, so the generation passes through every kind of
// state and cannot end early), in tandem
// (the api's constraint: `JsonConstraint` in the Sampler) and in llama.cpp (node-llama-cpp's
// JSON schema grammar), the four runs alternated in --rounds rounds, best of each.
//   npx tsx bench/json-constraint.ts [MODEL] [--threads 2] [--tokens 64] [--rounds 3] [--no-llama-cpp] [--json]
// The figures: each engine's decode time per token with the schema minus without it, and
// tandem's constraint time per token measured inside its calls (the difference of two decode
// times moves with the VM by more than a few ms). The two
// engines' grammars differ in their whitespace rules, so their constrained texts may differ.
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import {
  JsonConstraint,
  Sampler,
  compileJsonSchema,
  generate,
  openModel,
  type TokenConstraint,
} from '../src/engine/index.js';
import { benchPromptFor } from './model.js';
import { formatTable } from './table.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    threads: { type: 'string', default: '2' },
    tokens: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
    'prompt-tokens': { type: 'string', default: '32' },
    'no-llama-cpp': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const path = positionals[0] ?? '/work/models/tinyllama-q8_0.gguf';
const threads = Number(values.threads);
const tokens = Number(values.tokens);
const rounds = Number(values.rounds);
const prompt = benchPromptFor(path, Number(values['prompt-tokens']));
const schema = {
  type: 'object',
  properties: {
    items: {
      type: 'array',
      minItems: 8,
      items: {
        type: 'object',
        properties: {
          name: { type: 'string', maxLength: 12 },
          n: { type: 'integer' },
          ok: { type: 'boolean' },
        },
        required: ['name', 'n', 'ok'],
      },
    },
  },
  required: ['items'],
} as const;
const log = (line: string): void => void process.stderr.write(`${line}\n`);

/**
 * Decode ms per token (the first token, the prompt's, left out), how many masks ran, and
 * (tandem) the constraint's own time per generated token: its calls timed one by one, so the
 * figure does not move with the VM's speed for the model's work.
 */
interface Run {
  msPerToken: number;
  masks: number;
  constraintMs: number | null;
  text: string;
}

const opened = await openModel(path, { threads });
const { model, tokenizer } = opened;
if (!tokenizer) throw new Error(`${path} has no tokenizer`);
const node = compileJsonSchema(schema);
const stopTokens = new Set(tokenizer.vocab.endOfGeneration);

async function runTandem(constrained: boolean): Promise<Run> {
  let masks = 0;
  let spentMs = 0;
  const timed = <T>(run: () => T): T => {
    const t0 = performance.now();
    const out = run();
    spentMs += performance.now() - t0;
    return out;
  };
  let constraint: TokenConstraint | undefined;
  if (constrained) {
    const inner = new JsonConstraint(tokenizer!, node, stopTokens);
    constraint = {
      allows: (id) => timed(() => inner.allows(id)),
      accept: (id) => timed(() => inner.accept(id)),
      mask: (logits) => {
        masks++;
        timed(() => inner.mask(logits));
      },
    };
  }
  const sampler = new Sampler({ temperature: 0, ...(constraint ? { constraint } : {}) });
  const cache = model.newSession({ contextLength: prompt.length + tokens + 8 });
  const r = await generate(model, cache, prompt, {
    maxTokens: tokens,
    pick: (l) => sampler.sample(l),
    stopTokens,
  });
  return {
    msPerToken: 1000 / r.decodeTokS,
    masks,
    constraintMs: spentMs / Math.max(1, r.tokens.length),
    text: tokenizer!.decode(r.tokens, { stripLeadingSpace: false }),
  };
}

const llamaCpp = values['no-llama-cpp'] ? undefined : await openLlamaCpp();

async function openLlamaCpp(): Promise<(constrained: boolean) => Promise<Run>> {
  const { getLlama, LlamaLogLevel, LlamaGrammarEvaluationState } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const lm = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  const context = await lm.createContext({
    contextSize: prompt.length + tokens + 64,
    threads,
    batchSize: 512,
  });
  const grammar = await llama.createGrammarForJsonSchema(schema as never);
  const seq = context.getSequence();
  return async (constrained) => {
    await seq.clearHistory();
    const stamps: number[] = [];
    const out: number[] = [];
    const state = constrained ? new LlamaGrammarEvaluationState({ model: lm, grammar }) : undefined;
    for await (const token of seq.evaluate(prompt as never[], {
      temperature: 0,
      ...(state ? { grammarEvaluationState: state } : {}),
    })) {
      stamps.push(performance.now());
      out.push(token as number);
      if (out.length >= tokens || stopTokens.has(token as number)) break;
    }
    const n = stamps.length - 1;
    return {
      msPerToken: n > 0 ? ((stamps[n] as number) - (stamps[0] as number)) / n : NaN,
      masks: 0,
      constraintMs: null,
      text: tokenizer!.decode(out, { stripLeadingSpace: false }),
    };
  };
}

const best = new Map<string, Run>();
const keep = (key: string, r: Run): void => {
  const b = best.get(key);
  if (!b) best.set(key, r);
  else
    best.set(key, {
      ...(r.msPerToken < b.msPerToken ? r : b),
      constraintMs:
        r.constraintMs === null || b.constraintMs === null ? null : Math.min(r.constraintMs, b.constraintMs),
    });
};
// warm-up: one-time costs (the vocabulary index, llama.cpp's first graph)
await runTandem(true);
if (llamaCpp) await llamaCpp(true);
for (let round = 1; round <= rounds; round++) {
  for (const constrained of [false, true]) {
    const t = await runTandem(constrained);
    keep(`tandem ${constrained}`, t);
    log(
      `round ${round}: tandem ${constrained ? 'schema' : 'free  '} ${t.msPerToken.toFixed(2)} ms/token, ${t.masks} masks`,
    );
    if (llamaCpp) {
      const l = await llamaCpp(constrained);
      keep(`llama.cpp ${constrained}`, l);
      log(
        `round ${round}: llama.cpp ${constrained ? 'schema' : 'free  '} ${l.msPerToken.toFixed(2)} ms/token`,
      );
    }
  }
}

const rows = ['tandem', ...(llamaCpp ? ['llama.cpp'] : [])].map((engine) => {
  const free = best.get(`${engine} false`) as Run;
  const held = best.get(`${engine} true`) as Run;
  return {
    engine,
    threads,
    tokens,
    free_ms_per_token: free.msPerToken,
    schema_ms_per_token: held.msPerToken,
    overhead_ms_per_token: held.msPerToken - free.msPerToken,
    constraint_ms_per_token: held.constraintMs,
    masks: engine === 'tandem' ? held.masks : null,
    schema_text: held.text,
  };
});
if (values.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
else {
  process.stdout.write(
    formatTable(
      ['engine', 'free ms/token', 'schema ms/token', 'overhead ms/token', 'constraint ms/token', 'masks'],
      rows.map((r) => [
        r.engine,
        r.free_ms_per_token.toFixed(2),
        r.schema_ms_per_token.toFixed(2),
        r.overhead_ms_per_token.toFixed(2),
        r.constraint_ms_per_token === null ? '-' : r.constraint_ms_per_token.toFixed(2),
        r.masks === null ? '-' : `${r.masks} of ${tokens}`,
      ]),
    ),
  );
  for (const r of rows)
    process.stdout.write(`${r.engine} schema text: ${JSON.stringify(r.schema_text.slice(0, 160))}\n`);
}
await opened.close();
process.exit(0);
