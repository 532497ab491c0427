import type { ChatMessage } from '../../engine/index.js';

/** One exchange: what the user said and what the model answered. */
export interface Turn {
  user: string;
  assistant: string;
}

/**
 * A conversation's running history: an optional system message and the turns so far, oldest
 * first. The system message is kept whatever is dropped; turns are dropped oldest first when
 * the history no longer fits the context.
 */
export class Conversation {
  private turns: Turn[] = [];

  constructor(private systemText: string | undefined = undefined) {}

  get system(): string | undefined {
    return this.systemText;
  }

  /** Sets the system message (empty text removes it); the turns stay. */
  setSystem(text: string): void {
    this.systemText = text === '' ? undefined : text;
  }

  get turnCount(): number {
    return this.turns.length;
  }

  /** Forgets every turn (the system message stays). */
  reset(): void {
    this.turns = [];
  }

  /** The messages for a new user message: system, the turns so far, then `user`. */
  messagesWith(user: string): ChatMessage[] {
    const out: ChatMessage[] =
      this.systemText !== undefined ? [{ role: 'system', content: this.systemText }] : [];
    for (const t of this.turns)
      out.push({ role: 'user', content: t.user }, { role: 'assistant', content: t.assistant });
    out.push({ role: 'user', content: user });
    return out;
  }

  add(turn: Turn): void {
    this.turns.push(turn);
  }

  /** Drops the oldest turn; false when there is none left to drop. */
  dropOldest(): boolean {
    return this.turns.shift() !== undefined;
  }
}
