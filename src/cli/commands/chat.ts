import { availableParallelism } from 'node:os';
import { defineCommand, type ParsedOptions } from '../options.js';
import { checkInteger, checkThreads } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import { Sampler, type SamplerOptions } from '../../engine/index.js';
import { EMBEDDED_MODEL, embeddedModelPath } from '../embedded-model.js';
import type { ChatBackend } from '../chat/backend.js';
import { ChatLoop } from '../chat/chat-loop.js';
import { Conversation } from '../chat/conversation.js';
import { LocalBackend } from '../chat/local-backend.js';
import { checkLocalProvider } from '../provider-check.js';
import { RemoteBackend } from '../chat/remote-backend.js';
import { clusterChoice, clusterOptions } from '../cluster-options.js';
import { clusterSecret, refuseSecretArgument, secretOptions } from '../secret.js';
import { command as run, samplingOptions } from './run.js';

// run's own definitions of the sampling and local-model options, so both commands say and check the same
const {
  'max-tokens': maxTokens,
  temperature,
  'top-p': topP,
  'top-k': topK,
  'min-p': minP,
  'repeat-penalty': repeatPenalty,
  seed,
  threads,
  context,
  'kv-type': kvType,
  nodes,
  parallel,
  provider,
} = run.options;

const chatOptions = {
  url: {
    type: 'string',
    description:
      "chat with a running OpenAI-compatible server (`tandem serve`) at this address instead of loading a model; MODEL then names the server's model",
    placeholder: 'URL',
  },
  'api-key': {
    type: 'string',
    description: "with --url: the server's API key (default: TANDEM_API_KEY)",
    placeholder: 'KEY',
  },
  system: {
    type: 'string',
    description: 'the system message to start with (/system changes it)',
    placeholder: 'text',
  },
  'max-tokens': maxTokens,
  temperature,
  'top-p': topP,
  seed,
  'top-k': topK,
  'min-p': minP,
  'repeat-penalty': repeatPenalty,
  threads,
  // run's --context, whose text says it is refused with --nodes: chat takes it there too
  context: {
    ...context,
    description:
      "KV cache positions, a positive integer (default: the model's context length, at most 4096); the conversation's oldest turns are dropped past it",
  },
  'kv-type': kvType,
  nodes,
  hosts: clusterOptions.hosts,
  parallel,
  provider,
  ...secretOptions,
} as const;

type ChatOptions = ParsedOptions<typeof chatOptions>;

function usage(message: string, hint: string): TandemError {
  return new TandemError('CLI_USAGE', `chat: ${message}`, { hint });
}

const sampling = (options: ChatOptions): SamplerOptions => samplingOptions(options);

/**
 * With --url the server samples with OpenAI's parameters only (temperature, top_p, seed) and
 * owns its threads and cache: the local-model options, given, would be silently ignored.
 */
function checkRemoteOptions(options: ChatOptions): void {
  const given = [
    options.threads !== undefined && '--threads',
    options.context !== undefined && '--context',
    options['kv-type'] !== kvType.default && '--kv-type',
    options['top-k'] !== topK.default && '--top-k',
    options['min-p'] !== minP.default && '--min-p',
    options['repeat-penalty'] !== repeatPenalty.default && '--repeat-penalty',
  ].filter((x): x is string => x !== false);
  if (given.length > 0)
    throw usage(
      `${given.join(', ')} ${given.length > 1 ? 'apply' : 'applies'} to a model loaded here, not with --url`,
      'the server samples with --temperature, --top-p and --seed only; drop the others, or set them on the server',
    );
}

/**
 * The split across nodes (--nodes or --hosts), checked once; options that apply only with it,
 * or never with it, are refused rather than ignored. Undefined: the model loads here.
 */
function checkNodesOptions(options: ChatOptions): ReturnType<typeof clusterChoice> {
  refuseSecretArgument('chat', options);
  const choice = clusterChoice('chat', options);
  if (choice === undefined) {
    if (options['secret-file'] !== undefined)
      throw usage('--secret-file applies only with --hosts', 'add --hosts FILE, or drop --secret-file');
    return undefined;
  }
  if (options.url !== undefined)
    throw usage(
      `${choice.nodes !== undefined ? '--nodes' : '--hosts'} and --url both given`,
      'chat with a server through --url, or load the model on nodes with --nodes N or --hosts FILE',
    );
  if (options['kv-type'] !== kvType.default)
    throw usage(
      '--kv-type applies to a model loaded in this process',
      'drop --kv-type with --nodes or --hosts',
    );
  return choice;
}

async function openBackend(model: string | undefined, options: ChatOptions): Promise<ChatBackend> {
  const log = (line: string): void => void process.stderr.write(`tandem chat: ${line}\n`);
  const split = checkNodesOptions(options);
  if (options.url !== undefined) {
    checkRemoteOptions(options);
    const apiKey = options['api-key'] ?? (process.env.TANDEM_API_KEY || undefined);
    return RemoteBackend.connect(
      {
        url: options.url,
        temperature: options.temperature,
        topP: options['top-p'],
        ...(options.seed !== undefined ? { seed: options.seed } : {}),
        ...(apiKey !== undefined ? { apiKey } : {}),
        ...(model !== undefined ? { model } : {}),
      },
      log,
    );
  }
  if (options['api-key'] !== undefined)
    throw usage('--api-key applies with --url only', 'drop --api-key, or chat with a server through --url');
  if (options.context !== undefined)
    checkInteger('chat', 'context', options.context, 1, Number.MAX_SAFE_INTEGER, 2048);
  const path = model ?? embeddedModelPath('chat');
  const context = options.context !== undefined ? { context: options.context } : {};
  if (split !== undefined) {
    if (split.nodes !== undefined) await checkLocalProvider('chat', options.provider);
    // local nodes share this machine's cores; a hostfile's nodes use their own unless told
    const threads =
      split.nodes !== undefined
        ? checkThreads(
            'chat',
            options.threads ?? Math.max(1, Math.floor(availableParallelism() / split.nodes)),
          )
        : options.threads !== undefined
          ? checkThreads('chat', options.threads)
          : undefined;
    return LocalBackend.openCluster(path, {
      members:
        split.nodes !== undefined
          ? { nodes: split.nodes }
          : { hosts: split.hosts as string, secret: clusterSecret('chat', options) },
      parallel: options.parallel ?? 'tp',
      provider: options.provider ?? (split.nodes !== undefined ? 'shm' : 'tcp'),
      ...(threads !== undefined ? { threads } : {}),
      sampling: sampling(options),
      log,
      ...context,
    });
  }
  return LocalBackend.open(path, {
    threads: checkThreads('chat', options.threads ?? availableParallelism()),
    kvType: options['kv-type'],
    sampling: sampling(options),
    log,
    ...context,
  });
}

export const command = defineCommand({
  name: 'chat',
  summary: 'a conversation with a model in the terminal: streamed answers, a running history',
  description:
    "Loads the model (or, with --url, talks to a running `tandem serve`) and reads messages line by line; each answer is streamed as it is generated, from the whole conversation rendered in the model's chat template " +
    '(ChatML when the file has none), and a dim line after it gives its tokens, time to first token and tokens/s. ' +
    'The KV cache is kept across turns (on this machine, or on the nodes with --nodes or --hosts), so each turn prefills only its new tokens. ' +
    'When the conversation no longer fits the context, the oldest turns are dropped (the system message stays) and the chat says so. ' +
    'Commands: /help, /reset (forget the conversation), /system TEXT (set the system message), /exit; Ctrl-D ends the chat, Ctrl-C stops an answer and, at the prompt, ends the chat. ' +
    '--nodes N splits the model across N local node processes, --hosts FILE across the nodes of a hostfile (each running `tandem node`, with the cluster secret from --secret-file or TANDEM_SECRET), as `tandem serve` does. ' +
    'Lines can be piped in as well (`printf "Hi\\n" | tandem chat`). ' +
    `Without MODEL and --url it chats with the model that ships with tandem, ${EMBEDDED_MODEL.about}.`,
  positionals: [
    {
      name: 'model',
      description: `path of the model: a .gguf file or a Hugging Face or MLX folder (default: the shipped ${EMBEDDED_MODEL.name}); with --url, the server's model id (default: the first it lists)`,
    },
  ],
  options: chatOptions,
  examples: [
    'tandem chat',
    'tandem chat model.gguf --temperature 0.7 --system "You are terse."',
    'tandem chat model.gguf --nodes 2 --parallel pp',
    'tandem chat model.gguf --hosts hosts.txt --secret-file ~/.config/tandem/cluster.secret',
    'tandem chat --url http://127.0.0.1:8080',
    'TANDEM_API_KEY=secret tandem chat --url http://10.0.0.2:8080 --max-tokens 512',
  ],
  async run({ options, positionals }) {
    checkInteger('chat', 'max-tokens', options['max-tokens'], 1, Number.MAX_SAFE_INTEGER, 128);
    // the sampler checks its parameters and throws typed errors, before anything is loaded
    new Sampler(sampling(options));
    const backend = await openBackend(positionals[0], options);
    try {
      const terminal = Boolean(process.stdin.isTTY && process.stdout.isTTY);
      await new ChatLoop(backend, new Conversation(options.system), {
        input: process.stdin,
        output: process.stdout,
        info: process.stderr,
        terminal,
        color: Boolean(process.stderr.isTTY) && !process.env.NO_COLOR,
        maxTokens: options['max-tokens'],
      }).run();
      return 0;
    } finally {
      await backend.close();
    }
  },
});
