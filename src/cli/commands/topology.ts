import { writeFileSync, existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { defineCommand } from '../options.js';
import { TandemError } from '../../errors/index.js';
import { checkPort, checkSeconds, portBindError } from '../checks.js';
import { loadHostfile } from '../../cluster/hostfile.js';
import { clusterSecretBytes, refuseSecretArgument, secretOptions } from '../secret.js';
import {
  DiscoveryAgent,
  classify,
  defaultConfigPath,
  exportMlxHostfile,
  interfaceInfoFrom,
  probeHost,
  readClusterConfig,
  relayRoutes,
  renderTopology,
  toConnectivity,
  type HostAddresses,
  type TopologyGraph,
} from '../../topology/index.js';

function graphJson(graph: TopologyGraph, extra: Record<string, unknown> = {}): string {
  const c = classify(graph);
  const routes = c.kind === 'disconnected' ? [] : relayRoutes(graph);
  return JSON.stringify({
    class: c.kind,
    ...(c.order.length ? { order: c.order } : {}),
    ...(c.hub ? { hub: c.hub } : {}),
    diameter: c.diameter === Infinity ? null : c.diameter,
    hosts: graph.hosts,
    links: graph.links,
    routes,
    connectivity: toConnectivity(graph),
    ...extra,
  });
}

export const command = defineCommand({
  name: 'topology',
  summary:
    'show the cluster graph (mesh, ring, line, star, partial), per-link latency and bandwidth, and a drawing',
  description:
    'The graph comes from --hostfile, else the cluster config written by `tandem init`, else a short discovery run (--discover) with the cluster secret. `--agent` runs a discovery agent until stopped, printing the graph as JSON lines whenever it changes.',
  options: {
    discover: { type: 'boolean', description: 'run discovery for --wait seconds and show what it finds' },
    agent: {
      type: 'boolean',
      description: 'run a discovery agent until stopped; print the graph as a JSON line on every change',
    },
    wait: {
      type: 'number',
      description: 'seconds to listen with --discover (at least 0.5, at most 2147483)',
      default: 3,
    },
    hostfile: {
      type: 'string',
      description:
        'read the graph from a hostfile: MLX JSON (hosts and cables) or a host:port list (hosts only)',
      placeholder: 'file',
    },
    config: { type: 'string', description: 'cluster config written by `tandem init`', placeholder: 'file' },
    'export-mlx': { type: 'string', description: 'write the graph as an MLX hostfile', placeholder: 'file' },
    ...secretOptions,
    host: { type: 'string', description: "this host's name in the cluster (default: the hostname)" },
    port: {
      type: 'number',
      description: 'discovery port (UDP hellos, TCP measurements), 1..65535',
      default: 47600,
    },
    interfaces: { type: 'list', description: 'only use these interfaces' },
    measure: {
      type: 'boolean',
      description: 'measure latency and bandwidth of each link (--no-measure to skip)',
      default: true,
    },
    json: { type: 'boolean', description: 'print JSON' },
  },
  examples: [
    'tandem topology',
    'tandem topology --discover --secret-file cluster.secret --json',
    'tandem topology --hostfile m3-ultra-jaccl.json --export-mlx copy.json',
  ],
  async run({ options }) {
    checkPort('topology', options.port);
    checkSeconds('topology', 'wait', options.wait);
    refuseSecretArgument('topology', options);
    const start = async (agent: DiscoveryAgent): Promise<void> => {
      await agent.start().catch((error: unknown) => {
        throw portBindError('topology', options.port, error);
      });
    };
    const agentOptions = async () => ({
      interfaceInfo: interfaceInfoFrom(await probeHost()),
      host: options.host ?? hostname(),
      secret: clusterSecretBytes('topology', options),
      port: options.port,
      measure: options.measure,
      ...(options.interfaces ? { interfaces: options.interfaces } : {}),
    });
    if (options.agent) {
      const agent = new DiscoveryAgent({
        ...(await agentOptions()),
        onChange: (g) =>
          process.stdout.write(
            graphJson(g, {
              host: agent.host,
              agreed: agent.agreed(),
              bridgeLoops: agent.loops(),
              ts: Date.now(),
            }) + '\n',
          ),
      });
      await start(agent);
      await new Promise<void>((resolve) => {
        process.once('SIGTERM', resolve);
        process.once('SIGINT', resolve);
      });
      await agent.stop();
      return 0;
    }
    let graph: TopologyGraph;
    let addresses = new Map<string, HostAddresses>();
    const configPath = options.config ?? defaultConfigPath();
    if (options.hostfile !== undefined) {
      ({ graph, addresses } = loadHostfile(options.hostfile, '--hostfile'));
    } else if (!options.discover && existsSync(configPath)) {
      const read = readClusterConfig(configPath);
      const config = read.config;
      graph = read.graph;
      // Each host is reachable at its cable addresses; MLX's `ips` lists them.
      for (const h of config.hosts) {
        const ips = config.links.flatMap((l) => (l.a === h ? [l.aAddress] : l.b === h ? [l.bAddress] : []));
        addresses.set(h, { ssh: h, ips });
      }
    } else if (options.discover) {
      const agent = new DiscoveryAgent(await agentOptions());
      await start(agent);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0.5, options.wait) * 1000));
      graph = agent.graph();
      await agent.stop();
    } else {
      throw new TandemError(
        'CLI_USAGE',
        `topology: no graph to show (no --hostfile, and no cluster config at ${configPath})`,
        {
          hint: 'run `tandem init` first, pass --hostfile, or run discovery with --discover --secret-file <file>',
        },
      );
    }
    if (options['export-mlx'] !== undefined)
      writeFileSync(
        options['export-mlx'],
        JSON.stringify(exportMlxHostfile(graph, addresses), null, 4) + '\n',
      );
    process.stdout.write(options.json ? graphJson(graph) + '\n' : renderTopology(graph));
    return 0;
  },
});
