import { defineCommand } from '../options.js';
import { checkPort, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { DISCOVERY_PORT, joinCluster, startNode } from '../../cluster/index.js';
import { checkClusterLimits, DEFAULT_SILENCE_MS } from '../../cluster/cluster-limits.js';
import { parseBytes } from '../../parallel/index.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';
import { kernelsChoices } from '../../kernels/webgpu/index.js';
import { kernelsDescription } from '../webgpu-model.js';

export const command = defineCommand({
  name: 'node',
  summary: 'run a node agent: holds one shard of a model and takes part in distributed runs',
  description:
    'Listens for a coordinator (`tandem run --hosts FILE`, `tandem bench cluster`) on --listen. Only coordinators that hold the cluster secret ' +
    '(--secret-file or TANDEM_SECRET, at least 16 bytes) are accepted (mutual HMAC challenge-response; the traffic is not encrypted, see docs/security.md). ' +
    "Each load reads only this node's slices of the model: from the file at the coordinator's absolute path when this host holds the same model there, " +
    'otherwise received from the coordinator (verified by SHA-256, cached by content hash under TANDEM_CACHE_DIR/slices), so the model may exist on the coordinator only. ' +
    `A coordinator silent for TANDEM_CLUSTER_SILENCE_MS (default ${DEFAULT_SILENCE_MS}) is lost and its session ended: raise it on slow or emulated machines, here and on the coordinator.`,
  options: {
    listen: {
      type: 'string',
      description: 'host:port to listen on (port 0 picks a free one)',
      default: '0.0.0.0:7100',
      placeholder: 'HOST:PORT',
    },
    ...secretOptions,
    threads: {
      type: 'number',
      description: `compute threads for this node, ${threadsBound} (default: every core)`,
    },
    'mem-limit': {
      type: 'string',
      description: 'bytes this node may hold, e.g. 8G (placement respects it)',
      placeholder: 'BYTES',
    },
    speed: {
      type: 'number',
      description:
        "this node's compute speed to report instead of measuring it at start (GFLOP/s of a Q8_0 matvec, as the calibration measures; placement uses it relative to the fastest node)",
    },
    kernels: {
      type: 'string',
      description: `${kernelsDescription}. webgpu: this node's shards run on its GPU (tensor, pipeline, expert and hybrid parallel; a load the GPU cannot take fails naming this node); auto: the GPU where there is one and the shard runs on it, else the CPU kernels. The speed probe measures the CPU kernels`,
      choices: kernelsChoices,
    },
    join: {
      type: 'string',
      description:
        'instead of listening, dial the coordinator (`tandem serve --cluster HOST:PORT`) and become a member; dial again after each session or a failed dial, every second',
      placeholder: 'HOST:PORT',
    },
    discover: {
      type: 'boolean',
      description:
        'like --join, but find the coordinator on the local network: probe for a `tandem serve --cluster` holding the same secret (UDP, IPv6 link-local multicast on every interface) before each dial',
    },
    'discovery-port': {
      type: 'number',
      description: `with --discover: the UDP port the coordinator answers on (default ${DISCOVERY_PORT})`,
    },
    'model-root': {
      type: 'string',
      description:
        "look for the coordinator's model under this directory, its absolute path appended (default: TANDEM_MODEL_ROOT, else /); missing or different there, the slices come from the coordinator",
      placeholder: 'DIR',
    },
    once: { type: 'boolean', description: 'exit when the first coordinator disconnects' },
    announce: {
      type: 'boolean',
      description: 'print `listening HOST:PORT` on stdout once listening (for launchers)',
    },
  },
  examples: [
    'tandem node --secret-file ~/.config/tandem/cluster.secret',
    'tandem node --listen 10.0.0.2:7100 --secret-file cluster.secret --mem-limit 12G',
    'tandem node --discover --secret-file cluster.secret',
  ],
  async run({ options }) {
    refuseSecretArgument('node', options);
    checkClusterLimits();
    let memLimit: number | undefined;
    if (options['mem-limit'] !== undefined) {
      memLimit = parseBytes(options['mem-limit']);
      if (memLimit === undefined)
        throw new TandemError('CLI_USAGE', `node: --mem-limit '${options['mem-limit']}' is not a byte size`, {
          hint: 'for example --mem-limit 8G',
        });
    }
    if (options.threads !== undefined) checkThreads('node', options.threads);
    if (options.speed !== undefined && !(Number.isFinite(options.speed) && options.speed > 0))
      throw new TandemError('CLI_USAGE', `node: --speed ${options.speed} is not a positive number`, {
        hint: 'give the GFLOP/s this node computes at, e.g. --speed 20, or drop it to measure',
      });
    const speed = options.speed !== undefined ? { speed: options.speed } : {};
    const secret = clusterSecret('node', options);
    const log = (line: string): void => void process.stderr.write(`tandem node: ${line}\n`);
    const modelRoot = options['model-root'] ?? process.env.TANDEM_MODEL_ROOT;
    if (options.join !== undefined && options.discover)
      throw new TandemError('CLI_USAGE', 'node: --join HOST:PORT and --discover both given', {
        hint: 'give the address (--join) or let the node find it (--discover), not both',
      });
    if (options['discovery-port'] !== undefined && !options.discover)
      throw new TandemError('CLI_USAGE', 'node: --discovery-port applies to --discover only', {
        hint: 'add --discover, or drop --discovery-port',
      });
    if (options['discovery-port'] !== undefined)
      checkPort('node', options['discovery-port'], '--discovery-port');
    if (options.join !== undefined || options.discover) {
      if (options.once || options.announce)
        throw new TandemError(
          'CLI_USAGE',
          'node: --once and --announce apply to a listening node, not --join or --discover',
          {
            hint: 'drop them: a member dials the coordinator again after each session',
          },
        );
      const member = await joinCluster({
        ...(options.join !== undefined ? { join: options.join } : {}),
        ...(options.discover
          ? { discover: { ...(options['discovery-port'] ? { port: options['discovery-port'] } : {}) } }
          : {}),
        secret,
        log,
        ...speed,
        ...(options.kernels ? { kernels: options.kernels } : {}),
        ...(options.threads !== undefined ? { threads: options.threads } : {}),
        ...(memLimit !== undefined ? { memLimit } : {}),
        ...(modelRoot ? { modelRoot } : {}),
      });
      log(
        options.join !== undefined
          ? `joining the cluster at ${options.join}`
          : 'looking for the cluster on the local network (--discover)',
      );
      const leave = (): void => {
        member.stop();
        void member.done.then(() => process.exit(0));
      };
      process.once('SIGTERM', leave);
      process.once('SIGINT', leave);
      await member.done;
      return 0;
    }
    const node = await startNode({
      listen: options.listen,
      secret,
      ...speed,
      ...(options.kernels ? { kernels: options.kernels } : {}),
      once: options.once,
      log,
      ...(options.threads !== undefined ? { threads: options.threads } : {}),
      ...(memLimit !== undefined ? { memLimit } : {}),
      ...(modelRoot ? { modelRoot } : {}),
    });
    if (options.announce) process.stdout.write(`listening ${node.address}\n`);
    else log(`listening on ${node.address}`);
    const stop = (): void => void node.close().then(() => process.exit(0));
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    await new Promise<void>((resolve) => node.server.once('close', resolve));
    // A session that ended mid-connect may leave timers behind: --once means exit now.
    if (options.once) process.exit(0);
    return 0;
  },
});
