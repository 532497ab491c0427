import { defineCommand } from '../options.js';
import { checkThreads } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { resolveModelPath } from '../../cluster/index.js';
import type { ProviderName } from '../../fabric/index.js';
import { benchPlanCluster, planClusterTable } from '../../../bench/plan-cluster.js';
import { benchPlanLocal, planCheckTable } from '../../../bench/plan-local.js';

export const command = defineCommand({
  name: 'bench plan',
  summary:
    "check `tandem plan`'s forecast for this machine against `tandem bench model` (or, with --nodes, `tandem bench cluster`) on the same file",
  description:
    'Each round calibrates this machine (as `tandem plan --calibrate`), forecasts the file, and measures it with `tandem bench model` (tandem only); ' +
    "with --nodes N it forecasts N local nodes of --threads each (sharing this host's memory bandwidth and cores, the link measured by a 2-rank all-reduce over each --provider) " +
    'and measures them with `tandem bench cluster` (its 1-node row checks one node). ' +
    'Rounds alternate and the best of each is kept. docs/plan.md records the result (goal: within 15%).',
  positionals: [{ name: 'MODEL', description: 'a GGUF file', required: true }],
  options: {
    threads: {
      type: 'list',
      description: 'thread counts to check (with --nodes: the threads of each node, the first given)',
      default: ['1', '2'],
    },
    nodes: {
      type: 'number',
      description: 'local nodes to forecast and measure with bench cluster (2 or more)',
    },
    parallel: { type: 'list', description: 'with --nodes: the splits, tp and/or pp', default: ['tp', 'pp'] },
    provider: { type: 'list', description: 'with --nodes: the fabrics, shm and/or tcp', default: ['shm'] },
    rounds: { type: 'number', description: 'alternated rounds, best of each kept', default: 2 },
    'prompt-tokens': { type: 'number', description: 'prompt length (as bench model)', default: 128 },
    tokens: { type: 'number', description: 'tokens to decode (as bench model)', default: 64 },
    json: { type: 'boolean', description: 'print JSON lines instead of a table' },
  },
  examples: [
    'tandem bench plan /work/models/tinyllama-q8_0.gguf --threads 1,2 --rounds 3',
    'tandem bench plan /work/models/tinyllama-q8_0.gguf --nodes 2 --threads 1 --parallel tp,pp --provider shm,tcp',
  ],
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
    if (options.nodes !== undefined) {
      const nodes = options.nodes;
      if (!Number.isInteger(nodes) || nodes < 2 || nodes > 8)
        throw new TandemError(
          'CLI_USAGE',
          `bench plan: --nodes must be an integer from 2 to 8, got ${nodes}`,
          {
            hint: 'for example --nodes 2 (leave it out to check one process against bench model)',
          },
        );
      const pick = <T extends string>(name: string, given: readonly string[], allowed: readonly T[]): T[] =>
        given.map((v) => {
          if (!(allowed as readonly string[]).includes(v))
            throw new TandemError(
              'CLI_USAGE',
              `bench plan: --${name} '${v}' is not one of ${allowed.join(', ')}`,
              {
                hint: `for example --${name} ${allowed.join(',')}`,
              },
            );
          return v as T;
        });
      const rows = await benchPlanCluster({
        model: resolveModelPath(positionals[0] as string),
        nodes,
        threads: threads[0]!,
        parallel: pick('parallel', options.parallel, ['tp', 'pp'] as const),
        providers: pick<ProviderName>('provider', options.provider, ['shm', 'tcp']),
        rounds: options.rounds,
        promptTokens: options['prompt-tokens'],
        tokens: options.tokens,
        log: (l) => process.stderr.write(`${l}\n`),
      });
      if (options.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
      else process.stdout.write(planClusterTable(rows));
      return 0;
    }
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
