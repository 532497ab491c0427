import { defineCommand } from '../options.js';
import { checkInteger } from '../checks.js';
import { resolveModelPath } from '../../cluster/index.js';
import { readExpertProfile } from '../../parallel/index.js';
import { availableParallelism } from 'node:os';
import {
  balances,
  benchMoe,
  moeTable,
  overallShares,
  sharedCoresNote,
  type Balance,
} from '../../../bench/moe.js';

export const command = defineCommand({
  name: 'bench moe',
  summary: 'expert parallel on local nodes: experts placed statically or by load (hot ones copied)',
  description:
    'Runs expert parallel over shm on N local nodes with the experts in contiguous id ranges (static), ' +
    "placed at load layer by layer by a routing profile with copies of the hot ones (profile: --expert-profile FILE, else one node's pass over the prompt), " +
    "or loaded static and re-placed by the nodes' own counters while loaded (dynamic: new experts loaded beside the old, switched at a step boundary); " +
    "reports prefill and decode tok/s, the busiest node's share of routed work over the mean (expected: averaged over the layers, from the routing; and measured: its CPU time in its own experts during the prefill), the copies, " +
    "and whether the tokens equal one node's. A generated model routes near-uniformly unless made with --router-skew.",
  positionals: [{ name: 'MODEL', description: 'a mixture-of-experts GGUF file', required: true }],
  options: {
    nodes: { type: 'number', description: 'local node processes (2..16)', default: 4 },
    balance: {
      type: 'list',
      description: 'placements to run',
      choices: balances,
      default: ['static', 'dynamic'],
    },
    'prompt-tokens': { type: 'number', description: 'prompt length', default: 128 },
    tokens: { type: 'number', description: 'tokens to decode', default: 32 },
    repeat: { type: 'number', description: 'timed generations per placement (best kept)', default: 2 },
    'expert-profile': {
      type: 'string',
      description:
        "the routing to place by and to measure shares with (tandem run --save-expert-profile); default one node's pass over the prompt",
      placeholder: 'FILE',
    },
    json: { type: 'boolean', description: 'print JSON lines instead of a table' },
  },
  examples: [
    'tandem make-model /tmp/moe.gguf --arch qwen3moe --shape small --experts 16 --router-skew zipf:1.2 --type q8_0',
    'tandem bench moe /tmp/moe.gguf --nodes 4 --json',
  ],
  async run({ options, positionals }) {
    checkInteger('bench moe', 'nodes', options.nodes, 2, 16, 4);
    checkInteger('bench moe', 'prompt-tokens', options['prompt-tokens'], 1, 4096, 128);
    checkInteger('bench moe', 'tokens', options.tokens, 1, 4096, 32);
    checkInteger('bench moe', 'repeat', options.repeat, 1, 20, 2);
    const { rows, profile } = await benchMoe({
      model: resolveModelPath(positionals[0] as string),
      nodes: options.nodes,
      balances: options.balance as Balance[],
      promptTokens: options['prompt-tokens'],
      tokens: options.tokens,
      repeat: options.repeat,
      ...(options['expert-profile'] !== undefined
        ? { profile: readExpertProfile(options['expert-profile']) }
        : {}),
      log: (l) => process.stderr.write(`${l}\n`),
    });
    process.stderr.write(
      `measured routing (share of choices per expert, layers' mean): ${overallShares(profile)
        .map((v) => v.toFixed(3))
        .join(' ')}\n`,
    );
    const note = sharedCoresNote(options.nodes, availableParallelism());
    if (note) process.stderr.write(`${note}\n`);
    if (options.json) for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    else process.stdout.write(moeTable(rows));
    return 0;
  },
});
