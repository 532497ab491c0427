// `tandem bench recover --join`: a model served on members that joined a cluster port,
// streams running, one more member joins; the decode throughput before the join and after
// the re-plan, the longest pause a stream saw, and whether every stream went on unbroken with
// the text of the run without the join.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect, createServer, type Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { ApiServer } from '../src/api/http-server.js';
import { loadClusterServedModel } from '../src/api/cluster-served-model.js';
import { streamCompletion, type StreamedCompletion } from '../src/api/sse-reader.js';
import { probeSpeed, type ClusterView } from '../src/cluster/index.js';
import { TandemError } from '../src/errors/index.js';
import { tiedToParent } from '../src/util/exit-with-parent.js';
import type { ParallelKind } from '../src/parallel/index.js';
import { benchPromptFor } from './model.js';
import { prompts } from './recover.js';
import { CpuCap } from './cpu-cap.js';
import { formatTable } from './table.js';

const tandemBin = resolve(import.meta.dirname, '..', 'bin', 'tandem.js');

export interface JoinBenchOptions {
  model: string;
  /** Members serving before the join (one more joins). */
  members: number;
  streams: number;
  promptTokens: number;
  maxTokens: number;
  /** Compute threads per member (default: the cores shared out among every member after the join). */
  threads?: number;
  /** The split (default auto: the cost model's choice on each placement). */
  parallel?: ParallelKind | 'auto';
  /**
   * The last member serving before the join runs capped at this fraction of one core
   * (CpuCap: Linux, root): a slow machine among the members, whose share of a tensor-parallel
   * split sets every step's pace, and of whose layers a pipeline hands the joining member some.
   */
  slowMember?: number;
  /** Every member's memory limit in bytes (`tandem node --mem-limit`): what each may hold of the model. */
  memberMem?: number;
  onProgress?: (line: string) => void;
}

/** The `--json` line. Tokens/s are the streams' text chunks (one a token) per second, all streams together. */
export interface JoinBenchRow {
  members_before: number;
  members_after: number;
  /** Whether the join re-planned (the cost model predicted a gain beyond the margin). */
  replanned: boolean;
  /** The coordinator's verdict on the join, with its predictions. */
  verdict: string;
  /** From the first token of the last stream to start (every stream decoding) to the join. */
  tok_s_before: number;
  /** From the first token after the re-plan's pause (the replay done) to the last; without a re-plan, from the join. */
  tok_s_after: number;
  /** From the join's request to the model placed on every member (NaN without a re-plan). */
  replan_ms: number;
  /** The longest gap between two tokens of one stream after the join: what a client saw of the re-plan. */
  pause_ms: number;
  streams: number;
  streams_completed: number;
  texts_equal: boolean;
}

function startMember(
  address: string,
  secret: string,
  o: { threads: number; memLimit?: number | undefined; cap?: CpuCap | undefined; speed?: number | undefined },
): ChildProcess {
  const mem = o.memLimit !== undefined ? ['--mem-limit', String(o.memLimit)] : [];
  const speed = o.speed !== undefined ? ['--speed', String(o.speed)] : [];
  const node = [tandemBin, 'node', '--join', address, '--threads', String(o.threads), ...mem, ...speed];
  const cap = o.cap;
  const env = { ...process.env, TANDEM_SECRET: secret };
  // a member ends with the bench however it ends (a `node --join` would otherwise keep
  // waiting for its cluster)
  if (!cap) return spawn(process.execPath, node, tiedToParent('ignore', 'ignore', env));
  // the shell puts itself under the cap, then becomes the node: capped from its first instruction (its speed probe included)
  return spawn(
    'sh',
    ['-c', 'echo $$ > "$0" && exec "$@"', cap.procs, process.execPath, ...node],
    tiedToParent('ignore', 'ignore', env),
  );
}

/**
 * A gate in front of the cluster port: the joining member is started early (its start takes
 * seconds) and dials here; its connection is held until `open()`, then piped through, so the
 * join lands when the bench says. A held connection the member gave up on (its handshake
 * deadline) is replaced by the one it dials next.
 */
async function gate(
  target: string,
): Promise<{ address: string; dialed: Promise<void>; open: () => void; close: () => void }> {
  const at = target.lastIndexOf(':');
  let held: Socket | undefined;
  let opened = false;
  let dialed = (): void => {};
  const first = new Promise<void>((r) => (dialed = r));
  const pass = (s: Socket): void => {
    const up = connect({ host: target.slice(0, at), port: Number(target.slice(at + 1)) });
    s.pipe(up).pipe(s);
    up.on('error', () => s.destroy());
    s.on('error', () => up.destroy());
  };
  const server = createServer((s) => {
    s.pause();
    s.on('error', () => undefined);
    if (opened) pass(s);
    else held = s;
    dialed();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const a = server.address();
  return {
    address: `127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`,
    dialed: first,
    open: () => {
      opened = true;
      if (held && !held.destroyed) pass(held);
    },
    close: () => void server.close(),
  };
}

/** Text chunks per second among `times` (ms, one a token, every stream together) within [from, to). */
function rate(times: readonly number[], from: number, to: number): number {
  const n = times.filter((t) => t >= from && t < to).length;
  return to > from ? (n * 1000) / (to - from) : NaN;
}

export async function benchJoin(o: JoinBenchOptions): Promise<JoinBenchRow> {
  const threads = o.threads ?? Math.max(1, Math.floor(availableParallelism() / (o.members + 1)));
  const progress = o.onProgress ?? (() => {});
  const secret = randomBytes(24).toString('hex');
  // The uncapped members are one machine's cores, alike by construction; each probing itself
  // at its own start on a shared machine would compare moments of its load (a joiner measured
  // at a busy moment looks slower than the member it should relieve). They report one figure,
  // probed here once; the capped member measures itself, the slow machine the bench stands for.
  const uncapped = o.slowMember !== undefined ? await probeSpeed({ threads }) : undefined;
  const cap =
    o.slowMember !== undefined ? CpuCap.create(`tandem-join-bench-${process.pid}`, o.slowMember) : undefined;
  const children: ChildProcess[] = [];
  let port = '';
  let closeGate = (): void => {};
  const server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots: o.streams,
    maxQueue: o.streams,
    load: () =>
      loadClusterServedModel(o.model, {
        cluster: '127.0.0.1:0',
        minMembers: o.members,
        secret,
        discoveryPort: 0,
        context: o.promptTokens + o.maxTokens + 8,
        ...(o.parallel ? { parallel: o.parallel } : {}),
        log: progress,
        onClusterPort: (a) => {
          port = a;
          for (let i = 0; i < o.members; i++)
            children.push(
              startMember(a, secret, {
                threads,
                memLimit: o.memberMem,
                ...(i === o.members - 1 ? { cap } : { speed: uncapped }),
              }),
            );
        },
      }),
  });
  try {
    await server.ready;
    const inputs = prompts(benchPromptFor(o.model, o.promptTokens), o.streams);
    const run = (onText?: () => void): Promise<StreamedCompletion[]> =>
      Promise.all(
        inputs.map((p) =>
          streamCompletion(
            server.url,
            { prompt: p, max_tokens: o.maxTokens, temperature: 0 },
            { signal: AbortSignal.timeout(600_000), clock: Date.now, ...(onText ? { onText } : {}) },
          ),
        ),
      );
    progress(`${o.streams} streams on ${o.members} member(s) (the texts to compare with)`);
    const reference = await run();
    progress(`${o.streams} streams again; one more member joins once a quarter of the tokens are out`);
    const door = await gate(port);
    closeGate = door.close;
    children.push(startMember(door.address, secret, { threads, memLimit: o.memberMem, speed: uncapped }));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      door.dialed,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new TandemError(
                'CLUSTER_TIMEOUT',
                'bench recover --join: the joining member did not start within 60 s',
                {
                  hint: 'check that `tandem node` starts on this machine',
                },
              ),
            ),
          60_000,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    let chunks = 0;
    let joinedAt = 0;
    const runs = await run(() => {
      if (joinedAt === 0 && ++chunks >= Math.max(1, Math.floor((o.streams * o.maxTokens) / 4))) {
        joinedAt = Date.now();
        door.open();
      }
    });
    if (joinedAt === 0)
      throw new TandemError('INTERNAL', 'bench recover --join: the streams ended before the join', {
        hint: 'ask for more --max-tokens',
      });
    const view = (await (await fetch(`${server.url}/v1/cluster`)).json()) as ClusterView;
    return joinRow(o, reference, runs, view, joinedAt);
  } finally {
    await server.close(0);
    closeGate();
    const exited = children.map(
      (c) =>
        new Promise<void>((r) =>
          c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r()),
        ),
    );
    for (const c of children) c.kill('SIGKILL');
    if (cap) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(exited), new Promise((r) => (timer = setTimeout(r, 5000)))]);
      clearTimeout(timer);
      cap.remove();
    }
  }
}

function joinRow(
  o: JoinBenchOptions,
  reference: readonly StreamedCompletion[],
  runs: readonly StreamedCompletion[],
  view: ClusterView,
  joinedAt: number,
): JoinBenchRow {
  const replaced = view.events.find((e) => e.kind === 'replaced' && e.atMs >= joinedAt)?.atMs;
  const times = runs.flatMap((r) => r.chunkTimes).sort((a, b) => a - b);
  // from the moment every stream decodes: before it, prompts are still being prefilled
  const first = Math.max(...runs.map((r) => r.chunkTimes[0] ?? joinedAt));
  const last = times[times.length - 1] ?? joinedAt;
  // the replay after a re-plan is the pause (pause_ms), not the new placement's pace
  const resumed = replaced !== undefined ? (times.find((t) => t > replaced) ?? replaced) : joinedAt;
  const gaps = runs.flatMap((r) =>
    r.chunkTimes.flatMap((t, i) => (i > 0 && t > joinedAt ? [t - (r.chunkTimes[i - 1] as number)] : [])),
  );
  return {
    members_before: o.members,
    members_after: view.placement?.ranks.length ?? 0,
    replanned: replaced !== undefined,
    verdict: view.replan ?? '',
    tok_s_before: rate(times, first, joinedAt),
    tok_s_after: rate(times, resumed, last + 1),
    replan_ms: replaced !== undefined ? replaced - joinedAt : NaN,
    pause_ms: Math.max(0, ...gaps),
    streams: o.streams,
    streams_completed: runs.filter((r) => r.done && r.error === undefined).length,
    texts_equal: runs.every((r, i) => r.done && r.error === undefined && r.text === reference[i]?.text),
  };
}

export function joinTable(r: JoinBenchRow): string {
  return (
    formatTable(
      ['members', 'tok/s before', 'tok/s after', 'replan ms', 'pause ms', 'completed', 'texts equal'],
      [
        [
          `${r.members_before} -> ${r.members_after}`,
          r.tok_s_before.toFixed(1),
          r.tok_s_after.toFixed(1),
          r.replan_ms.toFixed(0),
          r.pause_ms.toFixed(0),
          `${r.streams_completed}/${r.streams}`,
          r.texts_equal ? 'yes' : 'NO',
        ],
      ],
    ) + `${r.verdict}\n`
  );
}
