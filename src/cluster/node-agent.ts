import { hostname, availableParallelism } from 'node:os';
import { createServer, type Server, type Socket } from 'node:net';
import type { Communicator } from '../collectives/communicator.js';
import { createCommunicator } from '../collectives/create-communicator.js';
import { TandemError } from '../errors/index.js';
import type { KernelsChoice } from '../kernels/webgpu/index.js';
import { Sampler } from '../engine/sampling/index.js';
import {
  commBytes,
  generateOnRank,
  loadRank,
  gemmGroupOf,
  runsMixedInOnePass,
  shardBytes,
  usesDirectExchange,
  type LoadedRank,
} from '../parallel/index.js';
import {
  MalformedMessage,
  parseNodeMessage,
  PROTOCOL_VERSION,
  type GenerateBody,
  type LoadRequest,
  type NodeRequest,
} from './control-messages.js';
import { probeLinks, type LinkProbe } from './link-probe.js';
import { collectFigures, StepClock, type NodeFigures } from './node-figures.js';
import { NodeExperts, noExperts, stageBesideQueue } from './node-experts.js';
import { cpuBackendOf, NodeKernels } from './node-kernels.js';
import { NodeSequences } from './node-sequences.js';
import { trainOnNode } from './node-train.js';
import { silenceLimitMs } from './cluster-limits.js';
import { openShardFile, type ShardFile } from './slices/model-source.js';
import { probeSpeed, probeStream, STREAM_PROBE_MAX_BYTES, STREAM_PROBE_MIN_BYTES } from './speed.js';
import {
  errorToJson,
  mac,
  nonce,
  parseHostPort,
  readMessages,
  sameMac,
  send,
  watchSilence,
  type BusyWith,
  type Message,
} from './protocol.js';

export interface NodeAgentOptions {
  /** host:port to listen on for coordinators (port 0: any free port). */
  listen: string;
  secret: string;
  /** Compute threads for this node's kernels (default: every core). */
  threads?: number;
  /** Bytes this node may hold; a load over it is refused before reading weights. */
  memLimit?: number;
  /**
   * Kernels backend (default: the fastest CPU one, as `tandem run` and `bench model` use);
   * `webgpu` and `auto` put the shard on this node's GPU (NodeKernels). The speed and stream
   * probes measure the CPU kernels.
   */
  kernels?: KernelsChoice;
  /** Exit after the first coordinator session ends (nodes a launcher started). */
  once?: boolean;
  /**
   * Compute speed reported to coordinators (pipeline placement). Default: measured at start
   * by a short matvec probe (probeSpeed), unless `probe` is false.
   */
  speed?: number;
  probe?: boolean;
  /**
   * Look for the coordinator's model under this directory (its absolute path appended), e.g.
   * where this host mounts the same tree elsewhere. Missing or different there, the node
   * receives its slices from the coordinator.
   */
  modelRoot?: string;
  log?: (line: string) => void;
}

export type { LoadRequest } from './control-messages.js';

/** One coordinator session: at most one loaded model. */
class Session {
  private world: Communicator | undefined;
  private ctx: LoadedRank | undefined;
  private file: ShardFile | undefined;
  private compute: NodeKernels | undefined;
  /** Serving: this rank's KV caches of the sequences the coordinator drives (after a load). */
  private sequences: NodeSequences | undefined;
  /** The coordinator left: a load still under way frees what it built instead of keeping it. */
  private ended = false;
  /** This rank's links as measured at the load, and its serving steps' compute and communication time. */
  private probes: LinkProbe[] = [];
  private clock = new StepClock();
  /** The loaded model's experts: counters, and new placements staged beside the old (after a load). */
  experts: NodeExperts | undefined;
  /** A training rank under way (`tandem train --hosts`): aborted when the session ends. */
  private training: AbortController | undefined;
  /** Set while a load connects its world: an abort from the coordinator ends that wait. */
  private connecting: AbortController | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly o: Omit<NodeAgentOptions, 'listen'>,
  ) {}

  async handle(r: NodeRequest): Promise<Message> {
    switch (r.type) {
      case 'hello':
        return {
          hostname: hostname(),
          cores: availableParallelism(),
          pid: process.pid,
          memLimit: this.o.memLimit ?? null,
          threads: this.o.threads ?? null,
          speed: this.o.speed ?? null,
        };
      case 'load':
        return this.load(r.load);
      case 'generate':
        return this.generate(r.generate);
      case 'forward':
      case 'forward-batch':
      case 'forward-mixed': {
        const sequences = this.loaded();
        return this.clock.time((this.ctx as LoadedRank).meter, () => sequences.step(r.step));
      }
      case 'release':
        this.loaded().release(r.seqs);
        return {};
      case 'unload':
        await this.unload();
        return {};
      case 'stream':
        return this.stream(r.bytes, r.ms);
      case 'expert-load':
        return this.experts?.counts() ?? {};
      case 'experts-stage':
      case 'experts-switch': {
        if (!this.experts) throw noExperts();
        return r.type === 'experts-stage' ? this.experts.stage(r.replace) : this.experts.switch(r.replaceId);
      }
      case 'train': {
        const training = (this.training = new AbortController());
        try {
          return await trainOnNode(r.train, this.o.secret, training.signal, this.o.log);
        } finally {
          this.training = undefined;
        }
      }
    }
  }

  private async load(r: LoadRequest): Promise<Message> {
    await this.unload();
    const started = Date.now();
    const me = r.plan.ranks[r.rank];
    if (!me)
      throw new TandemError('CLUSTER_PROTOCOL', `rank ${r.rank} is not in the plan`, {
        hint: 'run the same tandem version everywhere',
      });
    const shard = (this.file = await openShardFile(r.model, r.source, {
      secret: this.o.secret,
      rank: r.rank,
      ...(this.o.modelRoot ? { modelRoot: this.o.modelRoot } : {}),
      ...(this.o.log ? { log: this.o.log } : {}),
    }));
    const file = shard.file;
    this.compute ??= new NodeKernels({
      ...(this.o.kernels ? { choice: this.o.kernels } : {}),
      ...(this.o.threads ? { threads: this.o.threads } : {}),
      ...(this.o.log ? { log: this.o.log } : {}),
    });
    // before the fabric comes up: a GPU that is absent or refuses the shard fails this node's load at once
    const compute = await this.compute.forLoad(file, r.plan, r.rank, r.contextLength);
    const root = parseHostPort(r.rendezvous, 'rendezvous');
    const rootRank = r.root ?? 0;
    const connecting = (this.connecting = new AbortController());
    const world = await createCommunicator({
      rank: r.rank,
      size: r.plan.nodes,
      provider: r.provider,
      secret: this.o.secret,
      timeoutMs: r.timeoutMs,
      connectTimeoutMs: r.timeoutMs,
      // a partial graph: the pairs it lacks are relayed through the other ranks
      ...(r.edges ? { graph: { size: r.plan.nodes, edges: r.edges } } : {}),
      rendezvous: {
        kind: 'root',
        address: r.rank === rootRank ? `${root.host}:${root.port}` : r.rendezvous,
        host: r.fabricHost,
        rank: rootRank,
      },
      onListening: (address) => send(this.socket, { event: 'listening', address }),
      threadsPerRank: this.o.threads ?? availableParallelism(),
      signal: connecting.signal,
    }).finally(() => (this.connecting = undefined));
    if (this.ended) {
      world.abort('the coordinator left during the load');
      await world.close().catch(() => undefined);
      throw new TandemError('CLUSTER_PROTOCOL', 'the coordinator left during the load', {
        hint: 'nothing to do: the node freed what it had loaded',
      });
    }
    // A failed load below leaves the world here: the failed request aborts it (see serve).
    this.world = world;
    const loaded = await loadRank({
      file,
      ...compute,
      ...(r.contextLength ? { contextLength: r.contextLength } : {}),
      plan: r.plan,
      world,
      wire: r.wire,
      logits: r.logits,
      ...(usesDirectExchange(r.provider)
        ? {
            exchange: {
              provider: r.provider,
              host: r.fabricHost,
              secret: this.o.secret,
              timeoutMs: r.timeoutMs,
              spin: exchangeSpin(r.plan.nodes, this.o.threads),
            },
          }
        : {}),
    });
    if (this.ended) {
      world.abort('the coordinator left during the load');
      loaded.model.destroy?.();
      await loaded.exchange?.close();
      await world.close().catch(() => undefined);
      throw new TandemError('CLUSTER_PROTOCOL', 'the coordinator left during the load', {
        hint: 'nothing to do: the node freed what it had loaded',
      });
    }
    // every rank measures its links here, together, before the first step
    try {
      this.probes = await probeLinks(world);
    } catch (e) {
      loaded.model.destroy?.();
      await loaded.exchange?.close();
      throw e;
    }
    this.clock = new StepClock();
    this.ctx = loaded;
    this.experts = new NodeExperts(loaded, file, r, this.o.memLimit);
    const c = this.ctx.model.config;
    this.sequences = new NodeSequences(loaded, Math.min(r.contextLength ?? c.contextLength, c.contextLength));
    return {
      rank: r.rank,
      bytes:
        shardBytes(c, file.tensors, me.shard, {
          ...(r.contextLength ? { contextLength: r.contextLength } : {}),
          ...(r.sequences ? { sequences: r.sequences } : {}),
        }) + commBytes(r.plan, r.provider),
      loadMs: Date.now() - started,
      origin: shard.origin(),
      onePass: runsMixedInOnePass(loaded),
      gemmGroup: gemmGroupOf(loaded) ?? null,
    };
  }

  private loaded(): NodeSequences {
    if (!this.sequences)
      throw new TandemError('CLUSTER_PROTOCOL', 'a serving step before load', { hint: 'load a model first' });
    return this.sequences;
  }

  private async generate(g: GenerateBody): Promise<Message> {
    const ctx = this.ctx;
    if (!ctx)
      throw new TandemError('CLUSTER_PROTOCOL', 'generate before load', { hint: 'load a model first' });
    // Seeded sampling: every rank that picks holds the same logits and the same seed, so picks agree.
    let sampler: Sampler | undefined;
    if (g.sampling) {
      sampler = new Sampler(g.sampling);
      sampler.accept(...g.prompt);
    }
    const result = await generateOnRank(ctx, g.prompt, {
      ...(sampler ? { pick: (logits: Float32Array) => (sampler as Sampler).sample(logits) } : {}),
      maxTokens: g.maxTokens,
      ...(g.stopTokens ? { stopTokens: new Set(g.stopTokens) } : {}),
      ...(g.contextLength !== undefined ? { contextLength: g.contextLength } : {}),
      ...(g.forced ? { forced: g.forced } : {}),
      ...(g.stream ? { onToken: (token: number) => send(this.socket, { event: 'token', token }) } : {}),
    });
    return { ...result };
  }

  /** Weight bytes per second streamed by a Q8_0 matvec over `bytes` for `ms` (probeStream), on this node's kernels and threads. */
  private async stream(bytes: number, ms: number): Promise<Message> {
    if (
      !(Number.isInteger(bytes) && bytes >= STREAM_PROBE_MIN_BYTES && bytes <= STREAM_PROBE_MAX_BYTES) ||
      !(ms >= 10 && ms <= 10_000)
    )
      throw new TandemError(
        'CLUSTER_PROTOCOL',
        `stream probe of ${bytes} bytes for ${ms} ms is out of range`,
        {
          hint: `ask for ${STREAM_PROBE_MIN_BYTES}..${STREAM_PROBE_MAX_BYTES} bytes and 10..10000 ms`,
        },
      );
    const backend = cpuBackendOf(this.o.kernels);
    const bytesPerSecond = await probeStream({
      bytes,
      ms,
      ...(this.o.threads ? { threads: this.o.threads } : {}),
      ...(backend ? { kernels: backend } : {}),
    });
    return { bytesPerSecond };
  }

  /** What the heartbeat carries while a shard is loaded (node-figures.ts). */
  figures(): NodeFigures | undefined {
    return this.ctx ? collectFigures(this.ctx, this.probes, this.clock) : undefined;
  }

  async unload(): Promise<void> {
    const world = this.world;
    const exchange = this.ctx?.exchange;
    this.ctx?.model.destroy?.();
    this.world = undefined;
    this.ctx = undefined;
    this.experts = undefined;
    this.sequences = undefined;
    await exchange?.close();
    if (world) await world.close().catch(() => undefined);
    this.file?.file.close();
    this.file = undefined;
  }

  /** The coordinator went away: fail fast on every peer, then free everything. */
  async end(): Promise<void> {
    this.ended = true;
    this.connecting?.abort(new Error('the coordinator disconnected'));
    this.training?.abort('the coordinator disconnected');
    this.ctx?.exchange?.abort('the coordinator disconnected');
    this.world?.abort('the coordinator disconnected');
    await this.unload();
    await this.compute?.close();
    this.compute = undefined;
  }

  abort(reason: string): void {
    this.connecting?.abort(new Error(reason));
    this.training?.abort(reason);
    this.ctx?.exchange?.abort(reason);
    this.world?.abort(reason);
  }
}

/** Starts an admitted session and calls `done` once it has ended and freed what it held. */
export type SessionStart = (done: () => void) => void;

/**
 * Queues a session start behind the node's current one. `waits` is called at once, with the
 * session in the way, when the start cannot run now.
 */
export type Admit = (start: SessionStart, from: string, waits: (busy: BusyWith) => void) => void;

/**
 * One connection to the node's control port. The handshake runs at once, whatever else is
 * connected, so a peer that sends garbage or nothing holds no place; a coordinator that proves
 * the secret is then admitted through `admit`, one session at a time, and only then welcomed.
 */
export function serve(socket: Socket, o: Omit<NodeAgentOptions, 'listen'>, admit: Admit): void {
  socket.setNoDelay(true);
  const challenge = nonce();
  let stage: 'handshake' | 'waiting' | 'session' = 'handshake';
  let session: Session | undefined;
  let ended: (() => void) | undefined;
  let queue: Promise<unknown> = Promise.resolve();
  const handshake = setTimeout(() => socket.destroy(), 10_000);
  let heartbeat: NodeJS.Timeout | undefined;
  let lastSeen = Date.now();
  send(socket, { type: 'challenge', nonce: challenge, version: PROTOCOL_VERSION });
  socket.on('close', () => {
    clearTimeout(handshake);
    clearInterval(heartbeat);
    const s = session;
    session = undefined;
    if (s) void s.end().finally(() => ended?.());
  });
  socket.on('error', () => socket.destroy());
  const begin =
    (coordinatorNonce: string): SessionStart =>
    (done) => {
      if (socket.destroyed) return done();
      ended = done;
      stage = 'session';
      lastSeen = Date.now();
      session = new Session(socket, o);
      // Both ends send heartbeats and drop a peer silent for the silence limit: the coordinator
      // then re-places without this node; this node frees its model and waits for the next.
      const silentMs = silenceLimitMs();
      heartbeat = watchSilence(
        () => lastSeen,
        silentMs,
        () => {
          o.log?.(`the coordinator sent nothing for ${silentMs} ms: ending its session`);
          socket.destroy();
        },
        () => {
          const figures = session?.figures();
          send(socket, { event: 'heartbeat', ...(figures ? { figures } : {}) });
        },
      );
      send(socket, {
        type: 'welcome',
        mac: mac(o.secret, 'node', coordinatorNonce),
        info: { hostname: hostname(), pid: process.pid },
      });
    };
  readMessages(
    socket,
    (m) => {
      lastSeen = Date.now();
      if (stage === 'handshake') {
        if (
          m.type !== 'auth' ||
          !sameMac(m.mac, mac(o.secret, 'coordinator', challenge)) ||
          typeof m.nonce !== 'string'
        ) {
          o.log?.('refused a coordinator that failed authentication');
          socket.destroy();
          return;
        }
        if (m.version !== PROTOCOL_VERSION) {
          o.log?.(
            `refused a coordinator of control protocol ${String(m.version)} (this node speaks ${PROTOCOL_VERSION}): run the same tandem version everywhere`,
          );
          socket.destroy();
          return;
        }
        clearTimeout(handshake);
        stage = 'waiting';
        // a proven coordinator that has to wait is told for whom, so that its timeout can say so
        const from = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
        admit(begin(m.nonce), from, (busy) => {
          o.log?.(`a coordinator from ${from} waits for the session of ${busy.from} to end`);
          send(socket, { type: 'busy', ...busy });
        });
        return;
      }
      const s = session;
      if (!s) {
        o.log?.('refused a coordinator that sent requests before it was welcomed');
        socket.destroy();
        return;
      }
      let r: ReturnType<typeof parseNodeMessage>;
      try {
        r = parseNodeMessage(m);
      } catch (e) {
        if (!(e instanceof MalformedMessage)) throw e;
        // nothing of it was acted on; the session ends as if the coordinator had left
        o.log?.(`closed the coordinator's connection: a malformed message: ${e.message}`);
        socket.destroy();
        return;
      }
      if (r.type === 'heartbeat') return;
      if (r.type === 'abort') {
        // beside the queue: it ends the collective a queued request waits in (a peer is lost)
        s.abort(`the coordinator aborted: ${r.reason}`);
        return;
      }
      if (r.type === 'experts-stage') return stageBesideQueue(socket, r, () => s.experts, o.log);
      const request = r;
      // Requests run one at a time, in order, like the collectives they drive.
      queue = queue.then(async () => {
        try {
          send(socket, { id: request.id, ok: true, result: await s.handle(request) });
        } catch (e) {
          o.log?.(`request '${request.type}' failed: ${(e as Error).message}`);
          s.abort(`a request failed on this node: ${(e as Error).message}`);
          send(socket, { id: request.id, ok: false, error: errorToJson(e) });
        }
      });
    },
    (why) => {
      o.log?.(`dropped a control connection: ${why}`);
      socket.destroy();
    },
  );
}

/**
 * The options with the node's speed: measured by a short matvec probe unless given, turned
 * off (`probe: false`, TANDEM_SPEED_PROBE=0) or failed (then placement treats it as average).
 */
export async function withSpeed<T extends Omit<NodeAgentOptions, 'listen'>>(o: T): Promise<T> {
  if (o.speed !== undefined || !(o.probe ?? process.env.TANDEM_SPEED_PROBE !== '0')) return o;
  const backend = cpuBackendOf(o.kernels);
  const speed = await probeSpeed({
    ...(o.threads ? { threads: o.threads } : {}),
    ...(backend ? { kernels: backend } : {}),
  }).catch((e: unknown) => {
    o.log?.(`speed probe failed (placement treats this node as average): ${(e as Error).message}`);
    return undefined;
  });
  return speed === undefined ? o : { ...o, speed };
}

/** Starts a node agent; resolves once it listens. `closed` settles when it stops. */
export async function startNode(
  o: NodeAgentOptions,
): Promise<{ address: string; server: Server; close: () => Promise<void> }> {
  const { host, port } = parseHostPort(o.listen, '--listen');
  o = await withSpeed(o);
  // One coordinator session at a time: the next starts when the previous has freed its model.
  let previous: Promise<void> = Promise.resolve();
  let closed = false;
  // the session running now: a coordinator admitted meanwhile waits behind it
  let current: BusyWith | undefined;
  const admit: Admit = (start, from, waits) => {
    if (current) waits(current);
    previous = previous.then(
      () =>
        new Promise<void>((resolve) => {
          if (closed) return resolve();
          current = { from, since: Date.now() };
          start(() => {
            current = undefined;
            resolve();
            if (o.once && !closed) {
              closed = true;
              server.close();
            }
          });
        }),
    );
  };
  const server = createServer((socket) => {
    if (closed) socket.destroy();
    else serve(socket, o, admit);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e) =>
      reject(
        new TandemError('CLUSTER_SPAWN', `cannot listen on ${o.listen}: ${e.message}`, {
          hint: 'pick a free port or another address',
          details: { listen: o.listen },
        }),
      ),
    );
    server.listen(port, host, () => resolve());
  });
  const a = server.address();
  const address = typeof a === 'object' && a ? `${host}:${a.port}` : o.listen;
  return { address, server, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/**
 * How the tensor-parallel exchange waits on a host running `nodes` nodes (shm: all of them
 * here) of `threads` compute threads each: when every thread has a core, it spins up to 2 ms,
 * because a peer's part comes when the peer has computed its half of a layer, often after the
 * fabric's adaptive window has ended, and a sleep then costs a wake-up on every exchange of a
 * decode step (docs/parallel.md, "Measured"); otherwise the fabric's adaptive window, so a
 * spinner never takes a core the peer computes on.
 */
export function exchangeSpin(nodes: number, threads: number | undefined): boolean | number {
  return nodes * (threads ?? availableParallelism()) <= availableParallelism() ? 2000 : true;
}
