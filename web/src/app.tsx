import { useEffect, useState } from 'preact/hooks';
import { followDashboard, storedKey, storeKey, Unauthorized } from './api.js';
import { Charts } from './charts.js';
import { Chat } from './chat.js';
import { EventsList } from './events-list.js';
import { addSnapshot, emptyHistory, type History } from './history.js';
import { Login } from './login.js';
import { MembersGraph } from './members-graph.js';
import { MembersTable } from './members-table.js';
import { Placement } from './placement.js';
import type { Snapshot } from './types.js';

/** Seconds between tries to reopen the stream after it broke (the server restarting, say). */
const RETRY_MS = 2000;

/**
 * Follows the live stream with `key` (null: none), reopening it when it breaks, until unmounted
 * or the key changes; `undefined` follows nothing (the login form is up).
 */
function useDashboard(key: string | null | undefined, onUnauthorized: () => void) {
  const [snapshot, setSnapshot] = useState<Snapshot | null>(null);
  const [history, setHistory] = useState<History>(emptyHistory);
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => {
    const controller = new AbortController();
    if (key === undefined) return;
    const run = async (): Promise<void> => {
      while (!controller.signal.aborted) {
        try {
          await followDashboard(
            key,
            (s) => {
              setProblem(null);
              setSnapshot(s);
              setHistory((h) => addSnapshot(h, s));
            },
            controller.signal,
          );
          setProblem('the server ended the live stream; reconnecting');
        } catch (err) {
          if (controller.signal.aborted) return;
          if (err instanceof Unauthorized) return onUnauthorized();
          setProblem(`no live stream (${(err as Error).message}); reconnecting`);
        }
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    };
    void run();
    return () => controller.abort();
  }, [key]);
  return { snapshot, history, problem };
}

export function App() {
  const [key, setKey] = useState(storedKey());
  const [needKey, setNeedKey] = useState(false);
  const unauthorized = (): void => setNeedKey(true);
  const { snapshot, history, problem } = useDashboard(needKey ? undefined : key, unauthorized);
  if (needKey)
    return (
      <Login
        rejected={key !== null}
        onKey={(k) => {
          storeKey(k);
          setKey(k);
          setNeedKey(false);
        }}
      />
    );
  const cluster = snapshot?.cluster ?? null;
  return (
    <main>
      <header>
        <h1>tandem</h1>
        <span class="model">{snapshot?.model ?? 'loading…'}</span>
        <span class={`status ${snapshot?.status ?? 'loading'}`}>{snapshot?.status ?? 'connecting'}</span>
        {snapshot && (
          <span class="figures">
            {snapshot.tokens_per_s.toFixed(1)} tok/s · {snapshot.running}/{snapshot.slots} running ·{' '}
            {snapshot.queue_depth} waiting · {snapshot.generated_tokens_total} tokens generated
          </span>
        )}
        {key !== null && (
          <button
            type="button"
            onClick={() => {
              storeKey(null);
              setKey(null);
            }}
          >
            forget key
          </button>
        )}
      </header>
      {problem && <p class="error">{problem}</p>}
      <section class="panel graph-panel">
        <h2>members</h2>
        {cluster ? (
          <MembersGraph members={cluster.members} links={cluster.links} />
        ) : (
          <p class="muted">the model is loading</p>
        )}
        {cluster && <MembersTable members={cluster.members} />}
      </section>
      <section class="panel">
        <h2>placement</h2>
        {cluster ? <Placement cluster={cluster} /> : <p class="muted">the model is loading</p>}
      </section>
      <section class="panel charts-panel">
        <h2>live</h2>
        <Charts history={history} />
      </section>
      <section class="panel">
        <h2>chat</h2>
        <Chat apiKey={key} onUnauthorized={unauthorized} />
      </section>
      <section class="panel">
        <h2>events</h2>
        <EventsList events={cluster?.events ?? []} />
      </section>
    </main>
  );
}
