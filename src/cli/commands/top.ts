import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { defineCommand } from '../options.js';
import { TandemError } from '../../errors/index.js';
import type { DashboardSnapshot } from '../../api/dashboard-snapshot.js';
import { readSnapshot, topBaseUrl } from '../top/top-source.js';
import { renderTop } from '../top/top-render.js';

/** Terminal sequences: the alternate screen (left as it was on exit), cursor home and clear. */
const ENTER = '\x1b[?1049h\x1b[?25l';
const LEAVE = '\x1b[?25h\x1b[?1049l';
const HOME_CLEAR = '\x1b[H\x1b[2J';

/** The API key from --api-key, --api-key-file or TANDEM_API_KEY (in that order); undefined for none. */
export function topApiKey(key: string | undefined, file: string | undefined): string | undefined {
  if (key !== undefined && file !== undefined)
    throw new TandemError('CLI_USAGE', 'top: --api-key and --api-key-file both given', {
      hint: 'pass the key one way: --api-key-file keeps it out of the process list',
    });
  if (file === undefined) return key ?? (process.env.TANDEM_API_KEY || undefined);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new TandemError(
      'INVALID_ARGUMENT',
      `top: cannot read --api-key-file ${file}: ${(e as Error).message}`,
      {
        hint: 'give a file that holds the server key on its first line',
        details: { file },
      },
    );
  }
  const first = text.split(/\r?\n/)[0]?.trim() ?? '';
  if (first === '')
    throw new TandemError('INVALID_ARGUMENT', `top: --api-key-file ${file} is empty`, {
      hint: 'write the server key on its first line',
      details: { file },
    });
  return first;
}

/** Redraws every `intervalS` until Ctrl-C; a failed read keeps the last screen and says why, and tries again. */
async function watch(
  base: string,
  key: string | undefined,
  intervalS: number,
  first: DashboardSnapshot,
): Promise<void> {
  let stopped = false;
  const stop = (): void => {
    stopped = true;
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const out = process.stdout;
  out.write(ENTER);
  try {
    let last = first;
    let problem = '';
    while (!stopped) {
      const screen = renderTop(last, { url: base, width: out.columns });
      out.write(HOME_CLEAR + screen + (problem ? `\n${problem}\n` : ''));
      // short sleeps, so Ctrl-C ends the wait at once
      for (let waited = 0; waited < intervalS * 1000 && !stopped; waited += 100) await sleep(100);
      if (stopped) break;
      try {
        last = await readSnapshot(base, key);
        problem = '';
      } catch (e) {
        problem = `${(e as Error).message}; trying again every ${intervalS} s (Ctrl-C quits)`;
      }
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    out.write(LEAVE);
  }
}

export const command = defineCommand({
  name: 'top',
  summary:
    'the cluster of a running `tandem serve` in the terminal: members, links, tokens/s, queue, placement',
  description:
    "Reads the server's dashboard feed (GET /v1/dashboard/events: the same figures as /v1/cluster and /metrics) and shows the members (state, memory, speed, compute and communication share of each token), the links (kind, measured latency and bandwidth, live bytes/s), tokens/s, queue depth, the placement and the latest events. " +
    'At a terminal it redraws every --interval seconds until Ctrl-C; with --once, or when stdout is not a terminal (a pipe, a file), it prints once and exits.',
  options: {
    url: {
      type: 'string',
      description: 'the server to watch (the address `tandem serve` prints)',
      placeholder: 'URL',
      default: 'http://127.0.0.1:8080',
    },
    'api-key': {
      type: 'string',
      description: "the server's API key (default: TANDEM_API_KEY)",
      placeholder: 'KEY',
    },
    'api-key-file': {
      type: 'string',
      description:
        "read the server's API key from the first line of this file (keeps it out of the process list)",
      placeholder: 'FILE',
    },
    interval: {
      type: 'number',
      description: 'seconds between redraws at a terminal, 0.2 to 3600',
      placeholder: 'S',
      default: 1,
    },
    once: { type: 'boolean', description: 'print the cluster once and exit (what a pipe gets anyway)' },
  },
  examples: [
    'tandem top',
    'tandem top --url http://10.0.0.2:8080 --api-key-file ~/.config/tandem/api.key',
    'tandem top --once | grep thunderbolt',
  ],
  async run({ options }) {
    const interval = options.interval;
    if (!(interval >= 0.2 && interval <= 3600))
      throw new TandemError('CLI_USAGE', `top: --interval ${interval} is out of range`, {
        hint: 'give seconds between 0.2 and 3600',
      });
    const base = topBaseUrl(options.url);
    const key = topApiKey(options['api-key'], options['api-key-file']);
    const first = await readSnapshot(base, key);
    if (options.once || !process.stdout.isTTY) {
      process.stdout.write(renderTop(first, { url: base }));
      return 0;
    }
    await watch(base, key, interval, first);
    return 0;
  },
});
