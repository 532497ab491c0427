/** What one line typed in the chat asks for. */
export type ChatInput =
  | { kind: 'message'; text: string }
  | { kind: 'empty' }
  | { kind: 'help' }
  | { kind: 'reset' }
  /** `/system TEXT` sets the system message; `/system` alone removes it (text ''). */
  | { kind: 'system'; text: string }
  | { kind: 'exit' }
  | { kind: 'unknown'; name: string };

/** The commands and what they do, as /help prints them. */
export const chatCommands: readonly (readonly [string, string])[] = [
  ['/help', 'list these commands'],
  ['/reset', 'forget the conversation (the system message stays)'],
  ['/system TEXT', 'set the system message (the conversation stays); /system alone removes it'],
  ['/exit', 'end the chat (so do Ctrl-D, and Ctrl-C at the prompt; Ctrl-C during an answer stops it)'],
];

/** Reads one line: a message, or a command (a line starting with `/`; `//` sends a message that starts with `/`). */
export function parseChatInput(line: string): ChatInput {
  const text = line.trim();
  if (text === '') return { kind: 'empty' };
  if (!text.startsWith('/')) return { kind: 'message', text };
  if (text.startsWith('//')) return { kind: 'message', text: text.slice(1) };
  const space = text.search(/\s/);
  const name = space < 0 ? text : text.slice(0, space);
  const rest = space < 0 ? '' : text.slice(space).trim();
  switch (name) {
    case '/help':
    case '/?':
      return { kind: 'help' };
    case '/reset':
    case '/clear':
      return { kind: 'reset' };
    case '/system':
      return { kind: 'system', text: rest };
    case '/exit':
    case '/quit':
    case '/bye':
      return { kind: 'exit' };
    default:
      return { kind: 'unknown', name };
  }
}
