import { hostname, platform } from 'node:os';
import { defineCommand } from '../options.js';
import { TandemError } from '../../errors/index.js';
import { checkInteger, checkPort, checkSeconds, portBindError } from '../checks.js';
import { clusterSecretBytes, secretOptions } from '../secret.js';
import {
  defaultConfigPath,
  diagnose,
  formatFindings,
  hasErrors,
  interfaceInfoFrom,
  probeHost,
  renderTopology,
  runInit,
  writeClusterConfig,
} from '../../topology/index.js';

export const command = defineCommand({
  name: 'init',
  summary:
    'bring a cluster up: doctor, discover neighbours, agree on the topology, address each cable, write the cluster config',
  description:
    'Run on every host at the same time with the same --secret-file. Each cable gets its own /30 from --subnet; the commands are printed, and run and verified with --apply. The cluster config is written to --config (default $TANDEM_CONFIG or ~/.config/tandem/cluster.json).',
  options: {
    mode: {
      type: 'string',
      description: 'transport the cluster will use',
      choices: ['rdma', 'tcp'],
      default: 'rdma',
    },
    topology: {
      type: 'string',
      description:
        'what the collectives need from the cables (auto: mesh if every pair is cabled, else ring, else relayed)',
      choices: ['ring', 'mesh', 'auto'],
      default: 'auto',
    },
    ...secretOptions,
    host: { type: 'string', description: "this host's name in the cluster (default: the hostname)" },
    expect: { type: 'number', description: 'wait until this many hosts are seen (a positive integer)' },
    wait: {
      type: 'number',
      description: 'seconds to wait for discovery, agreement and verification (at most 2147483)',
      default: 30,
    },
    subnet: {
      type: 'string',
      description: 'IPv4 network the per-cable /30 subnets are taken from',
      default: '10.99.0.0/16',
      placeholder: 'cidr',
    },
    port: {
      type: 'number',
      description: 'discovery port (UDP hellos, TCP checks), 1..65535',
      default: 47600,
    },
    interfaces: { type: 'list', description: 'only use these interfaces' },
    apply: { type: 'boolean', description: 'run the address commands and verify each cable' },
    force: { type: 'boolean', description: 'go on although doctor found errors' },
    measure: {
      type: 'boolean',
      description: "measure each link's latency and bandwidth (--no-measure to skip)",
      default: true,
    },
    config: { type: 'string', description: 'where to write the cluster config', placeholder: 'file' },
    json: { type: 'boolean', description: 'print the cluster config as JSON at the end' },
  },
  examples: [
    'tandem init --mode=rdma --topology=auto --secret-file cluster.secret --apply',
    'tandem init --mode=tcp --topology=ring --expect 4 --secret-file cluster.secret',
  ],
  async run({ options }) {
    const log = (line: string): void => {
      process.stderr.write(line + '\n');
    };
    checkPort('init', options.port);
    checkSeconds('init', 'wait', options.wait);
    if (options.expect !== undefined) checkInteger('init', 'expect', options.expect, 1);
    const secret = clusterSecretBytes('init', options);
    const mode = options.mode;
    const report = await probeHost();
    const findings = diagnose({ report, mode });
    const notable = findings.filter((f) => f.severity === 'error' || f.severity === 'warning');
    if (notable.length > 0) log(formatFindings(notable).trimEnd());
    if (hasErrors(findings)) {
      if (!options.force) {
        throw new TandemError('ABORTED', 'init: doctor found errors on this host', {
          hint: 'fix them as each finding says, or pass --force to go on anyway',
        });
      }
    }
    const result = await runInit({
      host: options.host ?? hostname(),
      secret,
      mode,
      topology: options.topology,
      port: options.port,
      subnet: options.subnet,
      ...(options.expect !== undefined ? { expect: options.expect } : {}),
      waitMs: options.wait * 1000,
      apply: options.apply,
      measure: options.measure,
      ...(options.interfaces ? { interfaces: options.interfaces } : {}),
      interfaceInfo: interfaceInfoFrom(report),
      os: platform(),
      log,
    }).catch((error: unknown) => {
      throw portBindError('init', options.port, error);
    });
    const path = options.config ?? defaultConfigPath();
    writeClusterConfig(path, result.config);
    log(`wrote ${path}`);
    if (options.json) process.stdout.write(JSON.stringify(result.config) + '\n');
    else process.stdout.write(renderTopology(result.graph));
    return 0;
  },
});
