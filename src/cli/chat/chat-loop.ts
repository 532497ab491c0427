import { createInterface, type Interface } from 'node:readline';
import { isTandemError } from '../../errors/index.js';
import { overflowOf, type AnswerStats, type ChatBackend } from './backend.js';
import { chatCommands, parseChatInput } from './chat-input.js';
import type { Conversation } from './conversation.js';

export interface ChatLoopOptions {
  input: NodeJS.ReadableStream;
  /** Where answers are streamed (and, on a terminal, the prompt is drawn). */
  output: NodeJS.WritableStream;
  /** Where the banner, notices, errors and the line after each answer go. */
  info: NodeJS.WritableStream;
  /** The input is a terminal: line editing, a prompt, Ctrl-C and Ctrl-D read as keys. */
  terminal: boolean;
  /** Dim the line after each answer (ANSI), on a terminal without NO_COLOR. */
  color: boolean;
  /** Answer tokens at most (--max-tokens). */
  maxTokens: number;
}

/** The line after an answer: tokens, time to first token, speed; what the prompt cost when known. */
export function statsLine(s: AnswerStats): string {
  const parts = [
    `${s.tokens} token${s.tokens === 1 ? '' : 's'}`,
    `TTFT ${s.ttftMs.toFixed(0)} ms`,
    `${s.tokS.toFixed(1)} tok/s`,
  ];
  if (s.promptTokens !== undefined)
    parts.push(
      `prompt ${s.promptTokens} tokens` +
        (s.prefilledTokens !== undefined ? `, ${s.prefilledTokens} prefilled` : ''),
    );
  if (s.finishReason === 'length') parts.push('cut at the token limit (--max-tokens or the context)');
  if (s.finishReason === 'aborted') parts.push('stopped');
  return parts.join(' · ');
}

/**
 * The conversation in a terminal (or over piped lines): reads a line, runs a command or sends
 * the message with the history to the backend, streams the answer, and adds the turn. Ends
 * on /exit, end of input (Ctrl-D), or Ctrl-C at the prompt; Ctrl-C during an answer stops
 * that answer (what was said stays in the history). Resolves once the input is closed.
 */
export class ChatLoop {
  private answering: AbortController | undefined;
  private readonly rl: Interface;

  constructor(
    private readonly backend: ChatBackend,
    private readonly conversation: Conversation,
    private readonly o: ChatLoopOptions,
  ) {
    this.rl = createInterface({ input: o.input, output: o.output, terminal: o.terminal, prompt: '> ' });
  }

  async run(): Promise<void> {
    const interrupt = (): void => {
      if (this.answering) this.answering.abort();
      else this.rl.close();
    };
    // on a terminal readline reads Ctrl-C as a key; piped input gets the signal itself
    this.rl.on('SIGINT', interrupt);
    process.on('SIGINT', interrupt);
    try {
      this.say(`chatting with ${this.backend.description}`);
      this.say('type a message; /help lists the commands, /exit or Ctrl-D ends the chat');
      this.prompt();
      for await (const line of this.rl) {
        if (!(await this.handle(line))) break;
        this.prompt();
      }
    } finally {
      process.off('SIGINT', interrupt);
      this.rl.close();
    }
  }

  /** Runs one line; false once the chat is to end. */
  private async handle(line: string): Promise<boolean> {
    const input = parseChatInput(line);
    switch (input.kind) {
      case 'empty':
        return true;
      case 'exit':
        return false;
      case 'help':
        for (const [name, what] of chatCommands) this.say(`${name.padEnd(14)}${what}`);
        return true;
      case 'reset':
        this.conversation.reset();
        this.say(
          'the conversation is forgotten' + (this.conversation.system ? ' (the system message stays)' : ''),
        );
        return true;
      case 'system':
        this.conversation.setSystem(input.text);
        this.say(input.text === '' ? 'no system message' : `system message set: ${input.text}`);
        return true;
      case 'unknown':
        this.say(
          `unknown command ${input.name}; /help lists the commands (start with // to send a message that starts with /)`,
        );
        return true;
      case 'message':
        await this.answer(input.text);
        return true;
    }
  }

  /**
   * Sends `text` with the history. When the conversation does not fit the context, drops the
   * oldest turns (the system message stays) and says so; when the message alone leaves too
   * little room for --max-tokens, the answer gets what room there is.
   */
  private async answer(text: string): Promise<void> {
    let maxTokens: number | undefined = this.o.maxTokens;
    let dropped = 0;
    for (;;) {
      const controller = new AbortController();
      this.answering = controller;
      let said = '';
      try {
        const stats = await this.backend.answer(
          this.conversation.messagesWith(text),
          maxTokens,
          (piece) => {
            if (said === '' && dropped > 0) this.announceDropped(dropped);
            said += piece;
            this.o.output.write(piece);
          },
          controller.signal,
        );
        if (said === '' && dropped > 0) this.announceDropped(dropped);
        this.o.output.write('\n');
        this.conversation.add({ user: text, assistant: said });
        this.say(statsLine(stats), true);
        return;
      } catch (error) {
        const overflow = said === '' ? overflowOf(error) : undefined;
        if (overflow && this.conversation.dropOldest()) {
          dropped++;
          continue;
        }
        if (overflow?.kind === 'answer' && maxTokens !== undefined) {
          maxTokens = overflow.room;
          this.say(
            `the context leaves room for ${overflow.room !== undefined ? `${overflow.room} answer tokens` : 'a shorter answer'} only (--max-tokens ${this.o.maxTokens})`,
          );
          continue;
        }
        if (said !== '') this.o.output.write('\n');
        if (!isTandemError(error)) throw error;
        this.say(`error [${error.code}]: ${error.message}\n  hint: ${error.hint}`);
        return;
      } finally {
        this.answering = undefined;
      }
    }
  }

  private announceDropped(n: number): void {
    this.say(
      `the conversation no longer fits the context: the ${n === 1 ? 'oldest turn was' : `${n} oldest turns were`} dropped (the system message stays)`,
    );
  }

  private prompt(): void {
    if (this.o.terminal) this.rl.prompt();
  }

  private say(line: string, dim = false): void {
    this.o.info.write(dim && this.o.color ? `\x1b[2m${line}\x1b[22m\n` : `${line}\n`);
  }
}
