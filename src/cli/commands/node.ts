import { defineCommand } from '../options.js';
import { checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { joinCluster, startNode } from '../../cluster/index.js';
import { parseBytes } from '../../parallel/index.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';

export const command = defineCommand({
  name: 'node',
  summary: 'run a node agent: holds one shard of a model and takes part in distributed runs',
  description:
    'Listens for a coordinator (`tandem run --hosts FILE`, `tandem bench cluster`) on --listen. Only coordinators that hold the cluster secret ' +
    '(--secret-file or TANDEM_SECRET, at least 16 bytes) are accepted (mutual HMAC challenge-response; the traffic is not encrypted, see docs/security.md). ' +
    "Each load reads only this node's slices of the model: from the file at the coordinator's absolute path when this host holds the same model there, " +
    'otherwise received from the coordinator (verified by SHA-256, cached by content hash under TANDEM_CACHE_DIR/slices), so the model may exist on the coordinator only.',
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
    kernels: {
      type: 'string',
      description: 'kernels backend (default: native when a C compiler builds it here, else wasm)',
      choices: ['native', 'wasm', 'reference'],
    },
    join: {
      type: 'string',
      description:
        'instead of listening, dial the coordinator (`tandem serve --cluster HOST:PORT`) and become a member; dial again after each session or a failed dial, every second',
      placeholder: 'HOST:PORT',
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
  ],
  async run({ options }) {
    refuseSecretArgument('node', options);
    let memLimit: number | undefined;
    if (options['mem-limit'] !== undefined) {
      memLimit = parseBytes(options['mem-limit']);
      if (memLimit === undefined)
        throw new TandemError('CLI_USAGE', `node: --mem-limit '${options['mem-limit']}' is not a byte size`, {
          hint: 'for example --mem-limit 8G',
        });
    }
    if (options.threads !== undefined) checkThreads('node', options.threads);
    const secret = clusterSecret('node', options);
    const log = (line: string): void => void process.stderr.write(`tandem node: ${line}\n`);
    const modelRoot = options['model-root'] ?? process.env.TANDEM_MODEL_ROOT;
    if (options.join !== undefined) {
      if (options.once || options.announce)
        throw new TandemError(
          'CLI_USAGE',
          'node: --once and --announce apply to a listening node, not --join',
          {
            hint: 'drop them: a member dials the coordinator again after each session',
          },
        );
      const member = await joinCluster({
        join: options.join,
        secret,
        log,
        ...(options.kernels ? { kernels: options.kernels } : {}),
        ...(options.threads !== undefined ? { threads: options.threads } : {}),
        ...(memLimit !== undefined ? { memLimit } : {}),
        ...(modelRoot ? { modelRoot } : {}),
      });
      log(`joining the cluster at ${options.join}`);
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
