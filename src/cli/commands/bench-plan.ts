import { defineCommand } from '../options.js';
import { checkThreads } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { resolveModelPath } from '../../cluster/index.js';
import { benchPlanLocal, planCheckTable } from '../../../bench/plan-local.js';

export const command = defineCommand({
  name: 'bench plan',
  summary: "check `tandem plan`'s forecast for this machine against `tandem bench model` on the same file",
  description:
    'Each round calibrates this machine (as `tandem plan --calibrate`), forecasts the file, and measures it with `tandem bench model` (tandem only); ' +
    'rounds alternate and the best of each is kept. docs/plan.md records the result (goal: within 15%).',
  positionals: [{ name: 'MODEL', description: 'a GGUF file', required: true }],
  options: {
    threads: { type: 'list', description: 'thread counts to check', default: ['1', '2'] },
    rounds: { type: 'number', description: 'alternated rounds, best of each kept', default: 2 },
    'prompt-tokens': { type: 'number', description: 'prompt length (as bench model)', default: 128 },
    tokens: { type: 'number', description: 'tokens to decode (as bench model)', default: 64 },
    json: { type: 'boolean', description: 'print JSON lines instead of a table' },
  },
  examples: ['tandem bench plan /work/models/tinyllama-q8_0.gguf --threads 1,2 --rounds 3'],
  async run({ options, positionals }) {
    const threads = options.threads.map((t) => checkThreads('bench plan', Number(t)));
    for (const [name, v] of [
      ['rounds', options.rounds],
      ['prompt-tokens', options['prompt-tokens']],
      ['tokens', options.tokens],
    ] as const)
      if (!Number.isInteger(v) || v < 1)
        throw new TandemError('CLI_USAGE', `bench plan: --${name} must be a positive integer, got ${v}`, {
          hint: `for example --${name} 2`,
        });
    const rows = await benchPlanLocal({
      model: resolveModelPath(positionals[0] as string),
      threads,
      rounds: options.rounds,
      promptTokens: options['prompt-tokens'],
      tokens: options.tokens,
      log: (l) => process.stderr.write(`${l}\n`),
    });
    if (options.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    else process.stdout.write(planCheckTable(rows));
    return 0;
  },
});
