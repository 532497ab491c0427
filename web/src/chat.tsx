import { useRef, useState } from 'preact/hooks';
import { streamChat, Unauthorized, type ChatMessage } from './api.js';

interface AnswerStats {
  ttftMs: number | null;
  tokensPerS: number | null;
  tokens: number | null;
}

/**
 * A chat that streams its answers from /v1/chat/completions and shows, for the latest, the
 * time to its first piece of text and its tokens per second (its tokens over the time from the
 * first piece to the end, so the prompt's prefill is not counted twice).
 */
export function Chat({ apiKey, onUnauthorized }: { apiKey: string | null; onUnauthorized: () => void }) {
  const [messages, setMessages] = useState<ChatMessage[]>([]);
  const [draft, setDraft] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [stats, setStats] = useState<AnswerStats | null>(null);
  const abort = useRef<AbortController | null>(null);

  async function send(e: Event): Promise<void> {
    e.preventDefault();
    if (!draft.trim() || busy) return;
    const asked: ChatMessage[] = [...messages, { role: 'user', content: draft }];
    setMessages([...asked, { role: 'assistant', content: '' }]);
    setDraft('');
    setBusy(true);
    setError(null);
    abort.current = new AbortController();
    const start = performance.now();
    let first: number | null = null;
    try {
      await streamChat(
        apiKey,
        asked,
        (p) => {
          if (first === null && p.text) first = performance.now();
          setMessages([...asked, { role: 'assistant', content: p.text }]);
          const end = performance.now();
          const spanS = first !== null ? (end - first) / 1000 : 0;
          setStats({
            ttftMs: first !== null ? first - start : null,
            tokens: p.completionTokens,
            tokensPerS: p.completionTokens !== null && spanS > 0 ? p.completionTokens / spanS : null,
          });
        },
        abort.current.signal,
      );
    } catch (err) {
      if (err instanceof Unauthorized) onUnauthorized();
      else if ((err as Error).name !== 'AbortError') setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <div class="chat">
      <div class="messages">
        {messages.map((m, i) => (
          <div key={i} class={`message ${m.role}`}>
            {m.content || (busy && i === messages.length - 1 ? '…' : '')}
          </div>
        ))}
      </div>
      {stats && (
        <p class="muted answer-stats">
          TTFT {stats.ttftMs !== null ? `${stats.ttftMs.toFixed(0)} ms` : '-'} ·{' '}
          {stats.tokensPerS !== null ? `${stats.tokensPerS.toFixed(1)} tok/s` : '- tok/s'}
          {stats.tokens !== null ? ` · ${stats.tokens} tokens` : ''}
        </p>
      )}
      {error && <p class="error">{error}</p>}
      <form onSubmit={(e) => void send(e)}>
        <input
          name="message"
          value={draft}
          placeholder="Say something to the model"
          onInput={(e) => setDraft((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={busy}>
          send
        </button>
        {busy && (
          <button type="button" onClick={() => abort.current?.abort()}>
            stop
          </button>
        )}
      </form>
    </div>
  );
}
