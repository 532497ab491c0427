import { platform } from 'node:os';
import { TandemError } from '../errors/index.js';
import { addressCommands, assignAddresses, hostAddresses, type AddressedLink } from './addressing.js';
import { classify, findRing, relayRoutes } from './classify.js';
import type { ClusterConfig } from './cluster-config.js';
import { DiscoveryAgent, type AgentOptions } from './discovery/agent.js';
import { whoIs } from './discovery/measure.js';
import { canonicalGraph, toConnectivity, type TopologyGraph } from './model.js';
import { runCommand, type CommandRunner } from './probes/host.js';

export interface InitOptions {
  host: string;
  secret: Buffer;
  mode: 'rdma' | 'tcp';
  topology: 'ring' | 'mesh' | 'auto';
  port: number;
  subnet: string;
  /** Wait until this many hosts are seen (else: until the graph is stable and agreed). */
  expect?: number;
  waitMs: number;
  apply: boolean;
  measure: boolean;
  interfaces?: readonly string[];
  /** Kind and line rate of local interfaces (from `probeHost`), recorded on each link. */
  interfaceInfo?: AgentOptions['interfaceInfo'];
  os?: string;
  run?: CommandRunner;
  log: (line: string) => void;
}

export interface InitResult {
  config: ClusterConfig;
  graph: TopologyGraph;
  commands: string[][];
  applied: boolean;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Which collective algorithm the cables allow for the requested topology. */
export function chooseAlgorithm(
  graph: TopologyGraph,
  requested: InitOptions['topology'],
): Pick<ClusterConfig, 'algorithm' | 'ring' | 'class'> {
  const c = classify(graph);
  const impossible = (what: string, hint: string): TandemError =>
    new TandemError(
      'TOPOLOGY_PLAN_IMPOSSIBLE',
      `init: ${what} (found a ${c.kind} of ${graph.hosts.length} hosts and ${graph.links.length} cables)`,
      {
        hint,
        details: { class: c.kind, missing: c.missingPairs },
      },
    );
  if (c.kind === 'disconnected')
    throw impossible(
      'some hosts cannot reach each other',
      'cable the groups together; `tandem topology plan` says how',
    );
  if (requested === 'mesh') {
    if (c.kind !== 'full-mesh' && c.kind !== 'single')
      throw impossible(
        `a full mesh needs ${c.missingPairs.length} more cable(s)`,
        'connect every pair, or use --topology=ring or auto',
      );
    return { algorithm: 'mesh', class: c.kind };
  }
  const ring = findRing(graph);
  if (requested === 'ring') {
    if (!ring)
      throw impossible(
        'the cables do not form a ring through every host',
        'give every host two neighbours in one loop, or use --topology=auto',
      );
    return { algorithm: 'ring', ring, class: c.kind };
  }
  if (c.kind === 'full-mesh' || c.kind === 'single') return { algorithm: 'mesh', class: c.kind };
  return ring ? { algorithm: 'ring', ring, class: c.kind } : { algorithm: 'relayed', class: c.kind };
}

/** Runs discovery until the graph is agreed by every host and stable (and holds `expect` hosts). */
async function discover(agent: DiscoveryAgent, opts: InitOptions, deadline: number): Promise<TopologyGraph> {
  let last = '';
  let stableSince = Date.now();
  for (;;) {
    const g = agent.graph();
    const text = canonicalGraph(g);
    if (text !== last) {
      last = text;
      stableSince = Date.now();
    }
    const enough = opts.expect === undefined ? g.hosts.length > 1 : g.hosts.length >= opts.expect;
    if (enough && agent.agreed() && Date.now() - stableSince >= 1000) return g;
    if (Date.now() > deadline) {
      const skewed = [...agent.clockSkews()]
        .filter(([, ms]) => Math.abs(ms) > 30_000)
        .map(([h, ms]) => `${h} (${(ms / 1000).toFixed(0)} s)`);
      if (skewed.length > 0) {
        throw new TandemError(
          'TOPOLOGY_DISCOVERY_TIMEOUT',
          `init: hellos from ${skewed.join(', ')} were refused: their clocks are more than 30 s off`,
          {
            hint: 'turn on time sync on every host (System Settings > General > Date & Time, or chrony), then run init again',
            details: { skewed },
          },
        );
      }
      throw new TandemError(
        'TOPOLOGY_DISCOVERY_TIMEOUT',
        `init: discovery saw ${g.hosts.length} host(s) (${g.hosts.join(', ')})${opts.expect ? ` of ${opts.expect} expected` : ''} and ${agent.agreed() ? 'agreement' : 'no agreement'} within ${opts.waitMs} ms`,
        {
          hint: 'start `tandem init` on every host with the same --secret-file, check the cables (`tandem doctor`), or raise --wait',
          details: { hosts: g.hosts },
        },
      );
    }
    await sleep(100);
  }
}

/** Checks each cable's new address reaches the right host, retrying while peers are still applying theirs. */
async function verify(plan: readonly AddressedLink[], opts: InitOptions, deadline: number): Promise<void> {
  for (const m of hostAddresses(plan, opts.host)) {
    for (;;) {
      const seen = await whoIs(m.peerAddress, opts.port, opts.secret, 1000).catch(
        (e: Error) => `(${e.message})`,
      );
      if (seen === m.peer) {
        opts.log(`verified: ${m.iface} ${m.address} -> ${m.peer} at ${m.peerAddress}`);
        break;
      }
      if (Date.now() > deadline) {
        throw new TandemError(
          'TOPOLOGY_APPLY_FAILED',
          `init: ${m.peerAddress} over ${m.iface} answered ${seen}, expected host ${m.peer}`,
          {
            hint: 'run `tandem init --apply` on every host at the same time, and check that nothing else uses that subnet',
            details: { iface: m.iface, address: m.peerAddress },
          },
        );
      }
      await sleep(200);
    }
  }
}

async function waitForAll(
  agent: DiscoveryAgent,
  hosts: readonly string[],
  state: string,
  deadline: number,
): Promise<void> {
  while (Date.now() < deadline) {
    const states = agent.states();
    if (hosts.every((h) => states.get(h) === state)) return;
    await sleep(100);
  }
}

/**
 * `tandem init` on one host: discover the neighbours with the other hosts' agents, agree on the
 * graph (every host computes the same graph, algorithm and address plan from the flooded link
 * state), print the address commands, apply and verify them with `apply`, and return the
 * cluster config to write.
 */
export async function runInit(opts: InitOptions): Promise<InitResult> {
  const deadline = Date.now() + opts.waitMs;
  const agent = new DiscoveryAgent({
    host: opts.host,
    secret: opts.secret,
    port: opts.port,
    measure: opts.measure,
    ...(opts.interfaces ? { interfaces: opts.interfaces } : {}),
    ...(opts.interfaceInfo ? { interfaceInfo: opts.interfaceInfo } : {}),
  });
  await agent.start();
  try {
    opts.log(`discovering neighbours as '${opts.host}' on port ${opts.port}...`);
    const graph = await discover(agent, opts, deadline);
    const choice = chooseAlgorithm(graph, opts.topology);
    for (const [peer, ms] of agent.clockSkews()) {
      if (Math.abs(ms) > 1000)
        opts.log(
          `warning: the clock of ${peer} is ${(ms / 1000).toFixed(1)} s off; turn on time sync (deadlines and heartbeats compare clocks)`,
        );
    }
    opts.log(
      `agreed on ${graph.hosts.length} hosts, ${graph.links.length} cables: ${choice.class}, collectives use ${choice.algorithm}${choice.ring ? ` (ring ${choice.ring.join(' -> ')})` : ''}`,
    );
    const plan = assignAddresses(graph, opts.subnet);
    const commands = addressCommands(plan, opts.host, opts.os ?? platform(), opts.mode);
    opts.log(commands.length ? 'address commands for this host:' : 'this host has no cables to address');
    for (const c of commands) opts.log(`  ${c.join(' ')}`);
    if (opts.apply) {
      const run = opts.run ?? runCommand;
      for (const c of commands) {
        await run(c[0] as string, c.slice(1)).catch((e: Error) => {
          throw new TandemError(
            'TOPOLOGY_APPLY_FAILED',
            `init: \`${c.join(' ')}\` failed: ${e.message.split('\n')[0]}`,
            {
              hint: 'run it by hand to see why (root is needed to change addresses), or run init without --apply and apply the commands yourself',
            },
          );
        });
      }
      await verify(plan, opts, deadline);
      agent.setState('verified');
      await waitForAll(agent, graph.hosts, 'verified', Math.min(deadline, Date.now() + 5000));
    } else opts.log('not applied: run again with --apply, or run the commands above');
    const measured = agent.graph();
    const figures = new Map(measured.links.map((l) => [`${l.a}:${l.aPort}-${l.b}:${l.bPort}`, l]));
    const links = plan.map((l) => {
      const m = figures.get(`${l.a}:${l.aPort}-${l.b}:${l.bPort}`);
      const out: AddressedLink = { ...l };
      if (m?.latencyUs !== undefined) out.latencyUs = m.latencyUs;
      if (m?.bandwidthGBps !== undefined) out.bandwidthGBps = m.bandwidthGBps;
      return out;
    });
    const config: ClusterConfig = {
      version: 1,
      mode: opts.mode,
      requested: opts.topology,
      ...choice,
      self: opts.host,
      hosts: graph.hosts,
      links,
      connectivity: toConnectivity(graph),
      routes: relayRoutes(graph),
      port: opts.port,
      createdAt: new Date().toISOString(),
    };
    return { config, graph, commands, applied: opts.apply };
  } finally {
    await agent.stop();
  }
}
