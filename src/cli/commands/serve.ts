import { availableParallelism } from 'node:os';
import { defineCommand } from '../options.js';
import { checkInteger, checkPort, checkPrefillChunk, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { ApiServer, loadClusterServedModel, type ServedModel } from '../../api/index.js';
import { kernelsChoices } from '../../kernels/webgpu/index.js';
import { loadKernelsServedModel } from '../served-kernels.js';
import { kernelsDescription } from '../webgpu-model.js';
import { clusterChoice, clusterOptions, memLimitOption } from '../cluster-options.js';
import { checkLocalProvider } from '../provider-check.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';
import { CLUSTER_PORT, DISCOVERY_PORT } from '../../cluster/index.js';
import { parseBytes, readExpertProfile, type ExpertProfile } from '../../parallel/index.js';
import { EMBEDDED_MODEL, embeddedModelPath } from '../embedded-model.js';
import { createLogger, defaultLogFormat, logFormats } from '../../util/log.js';
import { openPowerMeter } from '../../util/power/index.js';
import { GEMM_TOKENS } from '../../kernels/index.js';
import { MAX_PREFILL_PIECE } from '../../engine/index.js';

function usage(message: string, hint: string): TandemError {
  return new TandemError('CLI_USAGE', `serve: ${message}`, { hint });
}

/** Hosts that only this machine can reach: serving on them without a key is safe. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** How long running requests may go on after SIGINT/SIGTERM before they are cancelled. */
const SHUTDOWN_GRACE_MS = 5000;

export const command = defineCommand({
  name: 'serve',
  summary: 'serve a GGUF model over an OpenAI-compatible HTTP API, on this machine or split across nodes',
  description:
    "Loads the model and answers POST /v1/chat/completions (messages through the model's chat template), POST /v1/completions, " +
    'GET /v1/models, GET /health, POST /tokenize, POST /detokenize and GET /metrics (Prometheus), streaming with server-sent events as OpenAI does. ' +
    '--slots sequences run at once, each with its own KV cache of --context positions; more requests wait in a queue of --max-queue, and past it get 429 with Retry-After. ' +
    "On one machine a slot keeps its last prompt's K/V, and a request that starts the same is prefilled only from where they part (usage.prompt_tokens_details.cached_tokens), with the tokens it would get alone. " +
    'The port answers /health with 503 while the model loads; `listening on http://HOST:PORT` is printed on stderr once it is loaded. ' +
    'With --nodes N (local node processes) or --hosts FILE (nodes started with `tandem node`) the model is split across the nodes as `tandem run` splits it, and each decode step of all running sequences goes to every node as one batch. ' +
    'SIGINT/SIGTERM stop accepting, let running requests finish for up to 5 s (then cancel them), stop the nodes and exit 0. ' +
    "Each request gets one log line on stdout (its id, timings, tokens and outcome; --log-format), and GET /metrics shows the machine's power and J/token where it can be read. See docs/serve.md, docs/cluster.md and docs/metrics.md. " +
    `Without MODEL it serves the model that ships with tandem, ${EMBEDDED_MODEL.about}.`,
  positionals: [
    {
      name: 'model',
      description: `path of the model: a .gguf file or a Hugging Face or MLX folder (default: the shipped ${EMBEDDED_MODEL.name}, see above)`,
    },
  ],
  options: {
    host: {
      type: 'string',
      description: 'address to listen on; a non-loopback address without --api-key prints a warning',
      default: '127.0.0.1',
    },
    port: {
      type: 'number',
      description: 'TCP port; 0 picks a free one (the printed line says which)',
      default: 8080,
    },
    threads: { type: 'number', description: `compute threads, ${threadsBound} (default: all cores)` },
    kernels: {
      type: 'string',
      description: `${kernelsDescription}. With --nodes: the local nodes' kernels (webgpu/auto: their shards on this machine's GPU: tensor, pipeline, expert and hybrid parallel). Not with --hosts/--cluster: there each node uses its own (\`tandem node --kernels\`)`,
      choices: kernelsChoices,
    },
    slots: {
      type: 'number',
      description: 'sequences generated at once, each with its own KV cache',
      default: 4,
    },
    'max-queue': {
      type: 'number',
      description: 'requests that may wait for a slot; more get 429 with Retry-After',
      default: 64,
    },
    'prefill-chunk': {
      type: 'number',
      description: `prompt tokens prefilled in one step while other requests stream, ${GEMM_TOKENS} to ${MAX_PREFILL_PIECE} (default: two of the kernels' GEMM lane groups, 32 with x86 VNNI, 30 elsewhere). Larger gives more tokens/s in total when requests arrive together and longer pauses in the streams beside a prefill (a whole prompt of 128 tokens at once: about 4x the pause of 32); a request's tokens do not depend on it (docs/serve.md)`,
    },
    context: {
      type: 'number',
      description:
        "KV cache positions per slot: prompt plus generated tokens (default: the model's context length, at most 4096)",
    },
    'api-key': {
      type: 'string',
      description:
        'require this key on every route but /health (Authorization: Bearer KEY or X-Api-Key: KEY); default: TANDEM_API_KEY',
      placeholder: 'KEY',
    },
    cors: {
      type: 'string',
      description:
        "let web pages of these origins call the API from a browser, comma-separated (e.g. http://localhost:3000), or * for any; the key is still required where set (default: none, only the dashboard's own origin)",
      placeholder: 'ORIGINS',
    },
    'model-name': {
      type: 'string',
      description: 'the model id clients pass and /v1/models lists (default: the file name without .gguf)',
      placeholder: 'NAME',
    },
    ...clusterOptions,
    ...secretOptions,
    cluster: {
      type: 'string',
      description: `listen here for members started with \`tandem node --join HOST:PORT\` (port 0 picks one; default port ${CLUSTER_PORT}) and place the model on them as they join and leave (with --secret-file or TANDEM_SECRET)`,
      placeholder: 'HOST:PORT',
    },
    'discovery-port': {
      type: 'number',
      description: `with --cluster: answer members' discovery probes (\`tandem node --discover\`) on this UDP port (default ${DISCOVERY_PORT}; 0 turns discovery off)`,
    },
    'min-members': {
      type: 'number',
      description: 'with --cluster: place the model once this many members have joined (default 1)',
    },
    'mem-limit': {
      type: 'string',
      description:
        'with --nodes/--hosts: bytes each node may hold, e.g. 8G (placement fails before loading when the model cannot fit)',
      placeholder: 'BYTES',
    },
    'expert-profile': {
      type: 'string',
      description:
        "with --nodes/--hosts/--cluster and expert parallel: place each layer's experts by this routing profile (tandem run --save-expert-profile), hot experts copied",
      placeholder: 'FILE',
    },
    'rebalance-experts': {
      type: 'number',
      description:
        "with --nodes/--hosts/--cluster and expert parallel: every SECONDS, re-place each layer's experts by the members' counters while serving (loaded beside the old, switched at a step boundary; logged and on /v1/cluster)",
      placeholder: 'SECONDS',
    },
    'log-format': {
      type: 'string',
      description:
        'request log lines on stdout: pretty text, or one JSON object a line (default: pretty on a terminal, else json)',
      choices: logFormats,
    },
    'max-body': {
      type: 'string',
      description: 'longest request body in bytes (e.g. 4M); longer ones get 413',
      placeholder: 'BYTES',
      default: '4M',
    },
  },
  examples: [
    'tandem serve',
    'tandem serve model.gguf',
    'tandem serve model.gguf --port 8000 --slots 8 --context 2048 --model-name tiny',
    'tandem serve model.gguf --nodes 2 --parallel tp --slots 8',
    'tandem serve model.gguf --hosts hosts.txt --secret-file ~/.config/tandem/cluster.secret',
    'tandem serve /models/m.gguf --cluster 0.0.0.0:7110 --min-members 2 --secret-file cluster.secret',
    'TANDEM_API_KEY=secret tandem serve model.gguf --host 0.0.0.0',
    'curl http://127.0.0.1:8080/v1/chat/completions -H "content-type: application/json" -d \'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32}\'',
  ],
  async run({ options, positionals }) {
    const path = positionals[0] ?? embeddedModelPath('serve');
    const port = options.port === 0 ? 0 : checkPort('serve', options.port);
    const cluster = clusterChoice('serve', options);
    if (options.cluster !== undefined && cluster)
      throw usage(
        '--cluster and --nodes/--hosts both given',
        'members either join the cluster port (--cluster) or are listed (--nodes, --hosts)',
      );
    if (cluster?.nodes !== undefined) await checkLocalProvider('serve', cluster.provider);
    if (options['min-members'] !== undefined && options.cluster === undefined)
      throw usage('--min-members applies only with --cluster', 'add --cluster HOST:PORT, or drop it');
    if (options['discovery-port'] !== undefined && options.cluster === undefined)
      throw usage('--discovery-port applies only with --cluster', 'add --cluster HOST:PORT, or drop it');
    const members =
      options.cluster !== undefined
        ? {
            cluster: options.cluster.includes(':') ? options.cluster : `${options.cluster}:${CLUSTER_PORT}`,
            ...(options['min-members'] !== undefined
              ? { minMembers: checkInteger('serve', 'min-members', options['min-members'], 1, 64, 2) }
              : {}),
            ...(options['discovery-port'] !== undefined
              ? {
                  discoveryPort: checkInteger(
                    'serve',
                    'discovery-port',
                    options['discovery-port'],
                    0,
                    65535,
                    DISCOVERY_PORT,
                  ),
                }
              : {}),
            parallel: options.parallel ?? 'auto',
            ...(options.provider !== undefined ? { provider: options.provider } : {}),
            ...(options.wire !== undefined ? { wire: options.wire } : {}),
          }
        : undefined;
    const memLimit = memLimitOption('serve', options['mem-limit']);
    refuseSecretArgument('serve', options);
    if (options.kernels !== undefined && (members || (cluster && cluster.nodes === undefined)))
      throw usage(
        '--kernels applies to a model served from this process or its local nodes (--nodes) only',
        'drop --kernels: with --hosts/--cluster each node uses its own (`tandem node --kernels`)',
      );
    // --nodes makes its own secret; listed or joining members share the cluster's
    const secret =
      options.hosts !== undefined || options.cluster !== undefined
        ? clusterSecret('serve', options)
        : undefined;
    if (memLimit !== undefined && !cluster && !members)
      throw usage(
        '--mem-limit applies only with --nodes or --hosts',
        'add --nodes N or --hosts FILE, or drop it',
      );
    const experts = expertOptions(options, cluster !== undefined || members !== undefined);
    const threads =
      options.threads !== undefined || (!cluster && !members)
        ? checkThreads('serve', options.threads ?? availableParallelism())
        : undefined;
    const slots = checkInteger('serve', 'slots', options.slots, 1, 256, 4);
    const maxQueue = checkInteger('serve', 'max-queue', options['max-queue'], 0, 1_000_000, 64);
    const prefillChunk =
      options['prefill-chunk'] !== undefined
        ? checkPrefillChunk('serve', options['prefill-chunk'])
        : undefined;
    if (options.context !== undefined)
      checkInteger('serve', 'context', options.context, 1, Number.MAX_SAFE_INTEGER, 2048);
    const maxBody = parseBytes(options['max-body']);
    if (maxBody === undefined || maxBody < 1)
      throw usage(
        `--max-body '${options['max-body']}' is not a positive byte size`,
        'for example --max-body 4M',
      );
    const apiKey = options['api-key'] ?? (process.env.TANDEM_API_KEY || undefined);
    const corsOrigins = options.cors === undefined ? undefined : corsList(options.cors);
    const log = (line: string): void => void process.stderr.write(`tandem serve: ${line}\n`);
    const logger = createLogger(options['log-format'] ?? defaultLogFormat(process.stdout), 1);
    if (!apiKey && corsOrigins?.includes('*'))
      log(
        'warning: --cors * without an API key: any web page open in a browser on a machine that reaches this port can use the model; pass --api-key KEY or name the origins',
      );
    if (!apiKey && !isLoopback(options.host)) {
      log(
        `warning: listening on ${options.host} without an API key: anyone who can reach this port can use the model; pass --api-key KEY or set TANDEM_API_KEY`,
      );
    }
    let name = '';
    const load = async (): Promise<ServedModel> => {
      const common = {
        log,
        ...(threads !== undefined ? { threads } : {}),
        ...(options.context !== undefined ? { context: options.context } : {}),
        ...(options['model-name'] !== undefined ? { name: options['model-name'] } : {}),
      };
      const served =
        cluster || members
          ? await loadClusterServedModel(path, {
              ...common,
              ...(cluster ? { ...cluster, parallel: cluster.parallel ?? 'auto' } : members),
              ...(options.kernels !== undefined ? { kernels: options.kernels } : {}),
              ...(secret !== undefined ? { secret } : {}),
              ...(memLimit !== undefined ? { memLimit } : {}),
              sequences: slots,
              ...experts,
            })
          : await loadKernelsServedModel(path, options.kernels, common);
      name = served.name;
      return served;
    };
    const server = await ApiServer.start({
      host: options.host,
      port,
      maxBodyBytes: maxBody,
      slots,
      maxQueue,
      ...(prefillChunk !== undefined ? { prefillChunk } : {}),
      load,
      onBound: (url) => log(`bound ${url} (GET /health answers 503 until the model is loaded)`),
      logger,
      ...(apiKey ? { apiKey } : {}),
      ...(corsOrigins ? { corsOrigins } : {}),
    });
    // beside the model's loading: powermetrics takes a sample or two to answer
    const power = openPowerMeter().then((probe) => {
      server.metrics.setPower(probe);
      log(
        probe.meter
          ? `power: ${probe.meter.source} (GET /metrics shows watts and J/token)`
          : `power not shown on /metrics: ${probe.reason}`,
      );
      return probe;
    });
    const closePower = async (): Promise<void> => (await power).meter?.close();
    let stopping = false;
    let stopped!: () => void;
    const done = new Promise<void>((resolve) => (stopped = resolve));
    const stop = (signal: NodeJS.Signals): void => {
      if (stopping) return;
      stopping = true;
      log(`${signal}: finishing running requests (at most ${SHUTDOWN_GRACE_MS / 1000} s), then exiting`);
      void server.close(SHUTDOWN_GRACE_MS).then(stopped);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    try {
      await server.ready;
    } catch (error) {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      await server.close(0);
      await closePower();
      throw error;
    }
    if (!stopping)
      log(`listening on ${server.url} as model '${name}' with ${slots} slot(s); dashboard at ${server.url}/`);
    await done;
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await closePower();
    log('stopped');
    return 0;
  },
});

/** --expert-profile and --rebalance-experts, checked: only over nodes, a readable profile, 1..86400 s. */
function expertOptions(
  options: { 'expert-profile'?: string | undefined; 'rebalance-experts'?: number | undefined },
  onNodes: boolean,
): { expertProfile?: ExpertProfile; rebalanceEverySeconds?: number } {
  const profile = options['expert-profile'];
  const every = options['rebalance-experts'];
  if ((profile !== undefined || every !== undefined) && !onNodes)
    throw usage(
      '--expert-profile and --rebalance-experts apply only with --nodes, --hosts or --cluster',
      'add --nodes N --parallel ep, or drop them',
    );
  return {
    ...(profile !== undefined ? { expertProfile: readExpertProfile(profile) } : {}),
    ...(every !== undefined
      ? { rebalanceEverySeconds: checkInteger('serve', 'rebalance-experts', every, 1, 86_400, 60) }
      : {}),
  };
}

/** --cors: `*`, or origins (`scheme://host[:port]`, http or https, nothing after), comma-separated. */
export function corsList(text: string): string[] {
  const list = text
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  const bad = list.filter((x) => {
    if (x === '*') return false;
    try {
      const u = new URL(x);
      return !(u.protocol === 'http:' || u.protocol === 'https:') || u.origin !== x;
    } catch {
      return true;
    }
  });
  if (list.length === 0 || bad.length > 0)
    throw new TandemError(
      'CLI_USAGE',
      `serve: --cors ${list.length === 0 ? 'names no origin' : `'${bad.join("', '")}' is not an origin`}`,
      {
        hint: 'give origins as a browser sends them, e.g. --cors http://localhost:3000,https://chat.example.org, or * for any',
      },
    );
  return list;
}
