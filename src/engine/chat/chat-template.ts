import { Template } from '@huggingface/jinja';
import { TandemError } from '../../errors/index.js';
import type { Tokenizer } from '../tokenizer/index.js';

export interface ChatMessage {
  role: string;
  content: string;
  /** An assistant turn's function calls, as chat templates read them (arguments an object). */
  tool_calls?: { type: 'function'; function: { name: string; arguments: Record<string, unknown> } }[];
  /** A `tool` message: the call it answers. */
  tool_call_id?: string;
}

/** Built-in formats, used only when asked for with `fallback`. */
export type ChatFallback = 'chatml';

const FALLBACKS: Record<ChatFallback, string> = {
  chatml:
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
};

export interface ChatRenderOptions {
  /** End with the opening of an assistant turn (default true). */
  addGenerationPrompt?: boolean;
  bosToken?: string;
  eosToken?: string;
  /** More template variables (e.g. `tools`, `enable_thinking`). */
  variables?: Record<string, unknown>;
}

export interface ChatTemplateOptions {
  /** Use this built-in format when the model has no template; without it a missing template is an error. */
  fallback?: ChatFallback;
}

function failed(what: string, e: unknown): TandemError {
  const reason = e instanceof Error ? e.message : String(e);
  return new TandemError('CHAT_TEMPLATE_FAILED', `the chat template failed to ${what}: ${reason}`, {
    hint: 'check tokenizer.chat_template in the model (or the messages it rejected); pass a working template to override it',
    details: { reason },
    cause: e,
  });
}

function checkMessages(messages: unknown): asserts messages is ChatMessage[] {
  if (!Array.isArray(messages) || messages.length === 0)
    throw new TandemError('CHAT_MESSAGES', 'chat messages must be a non-empty array', {
      hint: 'pass [{ role: "user", content: "..." }, ...]',
    });
  messages.forEach((m: unknown, i) => {
    const r = m as Partial<ChatMessage> | null;
    if (r === null || typeof r !== 'object' || typeof r.role !== 'string' || typeof r.content !== 'string')
      throw new TandemError('CHAT_MESSAGES', `chat message ${i} needs a string role and a string content`, {
        hint: 'each message reads { role: "system" | "user" | "assistant", content: "..." }',
        details: { index: i },
      });
  });
}

/** A parsed `tokenizer.chat_template` (Jinja), rendered with @huggingface/jinja. */
export class ChatTemplate {
  readonly source: string;
  private readonly template: Template;

  constructor(source: string) {
    this.source = source;
    try {
      this.template = new Template(source);
    } catch (e) {
      throw failed('parse', e);
    }
  }

  /** The model's template, or the requested fallback when it has none. */
  static fromModel(source: string | undefined, options: ChatTemplateOptions = {}): ChatTemplate {
    if (source !== undefined && source.trim() !== '') return new ChatTemplate(source);
    if (options.fallback !== undefined) return new ChatTemplate(FALLBACKS[options.fallback]);
    throw new TandemError(
      'CHAT_TEMPLATE_MISSING',
      'the model has no chat template (tokenizer.chat_template)',
      {
        hint: "pass a raw prompt instead of messages, supply a template, or ask for a built-in one (fallback: 'chatml')",
      },
    );
  }

  render(messages: readonly ChatMessage[], options: ChatRenderOptions = {}): string {
    checkMessages(messages);
    try {
      return this.template.render({
        ...options.variables,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: options.bosToken ?? '',
        eos_token: options.eosToken ?? '',
      });
    } catch (e) {
      throw failed('render', e);
    }
  }

  /**
   * Renders with the tokenizer's BOS/EOS texts and tokenizes the result, special tokens parsed.
   * BOS is added only when the tokenizer wants it and the template did not write it already.
   */
  encode(tokenizer: Tokenizer, messages: readonly ChatMessage[], options: ChatRenderOptions = {}): number[] {
    const bos = tokenizer.bosId === undefined ? '' : tokenizer.tokenText(tokenizer.bosId);
    const eos = tokenizer.eosId === undefined ? '' : tokenizer.tokenText(tokenizer.eosId);
    const text = this.render(messages, { bosToken: bos, eosToken: eos, ...options });
    const ids = tokenizer.encode(text, { parseSpecial: true, addBos: false });
    const wantsBos = tokenizer.vocab.addBos && tokenizer.bosId !== undefined;
    return wantsBos && ids[0] !== tokenizer.bosId ? [tokenizer.bosId as number, ...ids] : ids;
  }
}
