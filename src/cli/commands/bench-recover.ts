import { defineCommand } from '../options.js';
import { checkInteger } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { parseBytes } from '../../parallel/index.js';
import { benchRecover, table } from '../../../bench/recover.js';
import { benchJoin, joinTable } from '../../../bench/recover-join.js';

export const command = defineCommand({
  name: 'bench recover',
  summary:
    'kill one member of a served cluster mid-stream: time to detect, re-place and resume; texts compared',
  description:
    'Serves MODEL across --members local node processes (tensor parallel), runs --streams greedy streams to completion (the reference), ' +
    'runs them again and SIGKILLs member 1 once a quarter of the tokens are out. detect_ms: from the kill to the coordinator marking the member lost; ' +
    'replace_ms: to the model re-placed on the survivors; resume_ms: to the first token after the kill (the sequences replayed). ' +
    'texts_equal: every stream completed with the text of the run without the failure. ' +
    'With --join: serves on --members (default 2) members that joined a cluster port, and one more joins during the streams instead of a kill; ' +
    'reports tokens/s before the join and after the re-plan, the re-plan time and the longest pause a stream saw. See docs/cluster.md.',
  positionals: [{ name: 'model', description: 'GGUF model file', required: true }],
  options: {
    members: {
      type: 'number',
      description:
        'local members (node processes), at least 2 (default 3; with --join, those serving before it, default 2)',
    },
    join: {
      type: 'boolean',
      description:
        'one member joins during the streams instead of one killed; --json then prints {"members_before","members_after","replanned","verdict","tok_s_before","tok_s_after","replan_ms","pause_ms","streams","streams_completed","texts_equal"}',
    },
    'member-mem': {
      type: 'string',
      description:
        "with --join: every member's memory limit (tandem node --mem-limit, e.g. 27M): what each may hold",
    },
    parallel: {
      type: 'string',
      description: 'with --join: the split (default auto: the cost model chooses on each placement)',
      choices: ['tp', 'pp', 'auto'],
    },
    'slow-member': {
      type: 'number',
      description:
        'with --join: the last member serving before the join runs capped at this fraction of one core (Linux cgroup cpu controller, root): a slow machine',
    },
    streams: { type: 'number', description: 'concurrent greedy streams', default: 4 },
    'prompt-tokens': { type: 'number', description: 'prompt length', default: 32 },
    'max-tokens': { type: 'number', description: 'tokens per stream', default: 32 },
    threads: { type: 'number', description: 'compute threads per member (default: the cores shared out)' },
    json: {
      type: 'boolean',
      description:
        'print {"detect_ms","replace_ms","resume_ms","streams","streams_completed","texts_equal"} as one JSON line',
    },
  },
  examples: [
    'tandem bench recover /tmp/tl-q8_0.gguf --members 3',
    'tandem bench recover m.gguf --streams 2 --json',
    'tandem bench recover /tmp/tl-q8_0.gguf --join --members 2 --max-tokens 64',
    'tandem bench recover m.gguf --join --parallel pp --slow-member 0.05 --member-mem 27M --max-tokens 128',
  ],
  async run({ options, positionals }) {
    const common = {
      model: positionals[0] as string,
      members: checkInteger('bench recover', 'members', options.members ?? (options.join ? 2 : 3), 2, 64, 3),
      streams: checkInteger('bench recover', 'streams', options.streams, 1, 64, 4),
      promptTokens: checkInteger('bench recover', 'prompt-tokens', options['prompt-tokens'], 1),
      maxTokens: checkInteger('bench recover', 'max-tokens', options['max-tokens'], 4),
      ...(options.threads !== undefined
        ? { threads: checkInteger('bench recover', 'threads', options.threads, 1, 1024, 1) }
        : {}),
      ...(options.json ? {} : { onProgress: (line: string) => void process.stderr.write(`${line}\n`) }),
    };
    if (options.join) {
      const joined = await benchJoin({
        ...common,
        parallel: (options.parallel ?? 'auto') as 'tp' | 'pp' | 'auto',
        ...(options['member-mem'] !== undefined ? { memberMem: memberMem(options['member-mem']) } : {}),
        ...(options['slow-member'] !== undefined ? { slowMember: options['slow-member'] } : {}),
      });
      process.stdout.write(options.json ? JSON.stringify(joined) + '\n' : joinTable(joined));
      return joined.texts_equal && joined.streams_completed === joined.streams ? 0 : 1;
    }
    const row = await benchRecover(common);
    process.stdout.write(options.json ? JSON.stringify(row) + '\n' : table(row));
    return row.texts_equal && row.streams_completed === row.streams ? 0 : 1;
  },
});

function memberMem(text: string): number {
  const bytes = parseBytes(text);
  if (bytes === undefined || bytes <= 0)
    throw new TandemError('CLI_USAGE', `bench recover: --member-mem '${text}' is not a byte size`, {
      hint: 'for example --member-mem 27M',
    });
  return bytes;
}
