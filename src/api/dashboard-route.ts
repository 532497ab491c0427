import type { ServerResponse } from 'node:http';
import type { DashboardFeed } from './dashboard-feed.js';
import { EventStream } from './sse.js';

/**
 * GET /v1/dashboard/events: server-sent events, one `data: <DashboardSnapshot>` at once and
 * then each second, until the client goes away (`signal`) or the server closes the connection.
 * Resolves then, with the stream's subscription dropped.
 */
export async function streamDashboard(
  res: ServerResponse,
  feed: DashboardFeed,
  signal: AbortSignal,
): Promise<void> {
  const stream = new EventStream(res);
  await new Promise<void>((resolve) => {
    let unsubscribe = (): void => {};
    const end = (): void => {
      unsubscribe();
      resolve();
    };
    if (signal.aborted) return end();
    signal.addEventListener('abort', end, { once: true });
    unsubscribe = feed.subscribe((snapshot) => stream.send(snapshot));
  });
}
