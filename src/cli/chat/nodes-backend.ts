import { randomBytes } from 'node:crypto';
import { ClusterSession, launchLocalNodes, startingLine, type LocalNodes } from '../../cluster/index.js';
import {
  ChatTemplate,
  GgufModelFile,
  Tokenizer,
  configFromMetadata,
  tokenizerMetadataFromGguf,
  type ChatMessage,
  type SamplerOptions,
} from '../../engine/index.js';
import { TandemError } from '../../errors/index.js';
import type { ParallelKind } from '../../parallel/index.js';
import { answerBudget, type AnswerStats, type ChatBackend } from './backend.js';

export interface NodesBackendOptions {
  nodes: number;
  parallel: ParallelKind | 'auto';
  provider: 'shm' | 'tcp' | 'rdma';
  /** Compute threads per node. */
  threads: number;
  /** KV positions on every node; default the model's context length, at most 4096. */
  context?: number;
  sampling: SamplerOptions;
  log: (line: string) => void;
}

/** What the coordinator needs of the model file: tokenizer, chat template, context. */
interface ChatFile {
  tokenizer: Tokenizer;
  template: ChatTemplate;
  stopTokens: Set<number>;
  modelContext: number;
}

function readChatFile(path: string): ChatFile {
  const file = GgufModelFile.open(path);
  try {
    const entries = file.gguf.metadata.entries;
    if (!entries.has('tokenizer.ggml.tokens'))
      throw new TandemError('TOKENIZER_METADATA', `${path} has no tokenizer`, {
        hint: 'chat with a GGUF file that has tokenizer metadata',
      });
    const tokenizer = new Tokenizer(tokenizerMetadataFromGguf(entries));
    const source = file.meta('tokenizer.chat_template');
    const template = ChatTemplate.fromModel(
      typeof source === 'string' && source.trim() !== '' ? source : undefined,
      { fallback: 'chatml' },
    );
    const stopTokens = new Set<number>();
    for (let id = 0; id < tokenizer.vocabSize; id++) if (tokenizer.isEndOfGeneration(id)) stopTokens.add(id);
    const config = configFromMetadata(
      (k) => file.meta(k),
      new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
    );
    return { tokenizer, template, stopTokens, modelContext: config.contextLength };
  } finally {
    file.close();
  }
}

/**
 * The model split across local node processes (`--nodes N`, as `tandem run --nodes`): this
 * process renders and tokenizes the conversation, the nodes hold the shards and generate.
 * Each answer prefills the whole conversation (the nodes keep no cache between generations).
 * A node generation cannot be stopped halfway: Ctrl-C hides the rest of the answer, which the
 * nodes finish before the next message.
 */
export class NodesBackend implements ChatBackend {
  readonly description: string;
  private turn = 0;

  private constructor(
    private readonly file: ChatFile,
    private readonly contextLength: number,
    private readonly session: ClusterSession,
    private readonly local: LocalNodes,
    private readonly o: NodesBackendOptions,
    name: string,
  ) {
    this.description = `${name} across ${o.nodes} local nodes (--parallel ${o.parallel} over ${o.provider}, context ${contextLength} tokens)`;
  }

  static async open(path: string, o: NodesBackendOptions): Promise<NodesBackend> {
    const file = readChatFile(path);
    const contextLength = Math.min(o.context ?? Math.min(4096, file.modelContext), file.modelContext);
    const secret = randomBytes(16).toString('hex');
    o.log(startingLine(o.nodes, o.threads));
    const local = await launchLocalNodes(o.nodes, { secret, threads: o.threads });
    let session: ClusterSession | undefined;
    try {
      session = await ClusterSession.connect(
        local.addresses.map((address) => ({ address })),
        secret,
      );
      o.log(`loading ${path}: --parallel ${o.parallel} over ${o.provider}`);
      await session.load({
        model: path,
        parallel: o.parallel,
        provider: o.provider,
        greedy: o.sampling.temperature === 0,
        contextLength,
        measuredSpeed: false,
      });
      for (const line of session.planLines()) o.log(`  ${line}`);
      const name = path.replace(/^.*[\\/]/, '').replace(/\.gguf$/i, '');
      return new NodesBackend(file, contextLength, session, local, o, name);
    } catch (error) {
      session?.close();
      const explained = await local.explain(error);
      await local.stop();
      throw explained;
    }
  }

  async answer(
    messages: readonly ChatMessage[],
    maxTokens: number | undefined,
    onText: (text: string) => void,
    signal: AbortSignal,
  ): Promise<AnswerStats> {
    const { tokenizer, template, stopTokens } = this.file;
    const prompt = template.encode(tokenizer, messages);
    const budget = answerBudget(prompt.length, maxTokens, this.contextLength);
    const decoder = tokenizer.streamDecoder();
    const { sampling } = this.o;
    // a given seed still draws anew each turn: the same seed every turn would repeat its draws
    const seed = sampling.seed !== undefined ? sampling.seed + this.turn++ : undefined;
    const result = await this.session
      .generate({
        prompt,
        maxTokens: budget,
        stopTokens: [...stopTokens],
        onToken: (token) => {
          if (signal.aborted || stopTokens.has(token)) return;
          const piece = decoder.push(token);
          if (piece !== '') onText(piece);
        },
        ...(sampling.temperature === 0
          ? {}
          : { sampling: { ...sampling, ...(seed !== undefined ? { seed } : {}) } }),
      })
      .catch(async (error: unknown) => {
        throw await this.local.explain(error);
      });
    if (!signal.aborted) {
      const tail = decoder.flush();
      if (tail !== '') onText(tail);
    }
    return {
      tokens: result.tokens.length,
      ttftMs: result.ttftMs,
      tokS: result.decodeTokS,
      finishReason: signal.aborted ? 'aborted' : result.stopReason,
      promptTokens: prompt.length,
      prefilledTokens: prompt.length,
    };
  }

  async close(): Promise<void> {
    this.session.close();
    await this.local.stop();
  }
}
