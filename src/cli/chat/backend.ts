import { TandemError } from '../../errors/index.js';
import type { ChatMessage } from '../../engine/index.js';

/** How one answer went: what the dim line after it shows. */
export interface AnswerStats {
  /** Tokens generated, the end-of-generation token included. */
  tokens: number;
  /** Request sent (or prompt in) to first token out, in milliseconds. */
  ttftMs: number;
  /** Tokens per second after the first one (0 when only one was generated). */
  tokS: number;
  /** 'stop': the model ended its turn; 'length': cut at the token budget; 'aborted': stopped by Ctrl-C. */
  finishReason: 'stop' | 'length' | 'aborted';
  /** Tokens of the rendered conversation, when the backend knows them. */
  promptTokens?: number;
  /** Of those, the tokens prefilled for this answer (the rest were in the KV cache already). */
  prefilledTokens?: number;
}

/**
 * Where a conversation's answers come from: a model loaded in this process, or a running
 * OpenAI-compatible server. Each answer is given the whole conversation (system message, the
 * turns so far, the new user message last); the backend renders and sends it as it must.
 */
export interface ChatBackend {
  /** One line for the banner: the model and where it runs. */
  readonly description: string;
  /**
   * Streams the answer to `messages` through `onText`, at most `maxTokens` tokens (undefined:
   * as many as the context leaves). Throws CLI_CHAT_CONTEXT (`contextOverflow`) before any text
   * when the conversation does not fit. When `signal` fires it stops generating and resolves
   * with finishReason 'aborted' (the text sent so far stands).
   */
  answer(
    messages: readonly ChatMessage[],
    maxTokens: number | undefined,
    onText: (text: string) => void,
    signal: AbortSignal,
  ): Promise<AnswerStats>;
  close(): Promise<void>;
}

/**
 * What does not fit the context: the prompt itself (`prompt`), or the prompt with room for
 * `maxTokens` answer tokens (`answer`; `room` is how many fit, when known).
 */
export interface Overflow {
  kind: 'prompt' | 'answer';
  room?: number;
}

/** The error a backend throws when the conversation does not fit (details: an `Overflow`). */
export function contextOverflow(message: string, overflow: Overflow): TandemError {
  return new TandemError('CLI_CHAT_CONTEXT', message, {
    hint:
      overflow.kind === 'prompt'
        ? 'send a shorter message, or /reset the conversation (a local model takes a larger --context)'
        : 'lower --max-tokens, or /reset the conversation',
    details: { ...overflow },
  });
}

/** The `Overflow` of a CLI_CHAT_CONTEXT error, else undefined. */
export function overflowOf(error: unknown): Overflow | undefined {
  if (!(error instanceof TandemError) || error.code !== 'CLI_CHAT_CONTEXT') return undefined;
  const { kind, room } = error.details;
  if (kind !== 'prompt' && kind !== 'answer') return undefined;
  return typeof room === 'number' ? { kind, room } : { kind };
}

/**
 * The tokens an answer may take: `maxTokens`, or all the context leaves. The last generated
 * token is never fed back, so prompt + budget - 1 positions must fit; CLI_CHAT_CONTEXT when
 * they do not.
 */
export function answerBudget(promptTokens: number, maxTokens: number | undefined, context: number): number {
  if (promptTokens > context)
    throw contextOverflow(
      `the conversation has ${promptTokens} tokens, more than the context of ${context}`,
      {
        kind: 'prompt',
      },
    );
  const room = context - promptTokens + 1;
  if (maxTokens !== undefined && maxTokens > room)
    throw contextOverflow(
      `the conversation's ${promptTokens} tokens leave room for ${room} of the ${maxTokens} answer tokens (--max-tokens) in the context of ${context}`,
      { kind: 'answer', room },
    );
  return maxTokens ?? room;
}
