import { clock } from './format.js';
import type { ClusterEvent } from './types.js';

/** The cluster's events, newest first. */
export function EventsList({ events }: { events: ClusterEvent[] }) {
  if (events.length === 0) return <p class="muted">no events yet</p>;
  return (
    <ul class="events">
      {[...events].reverse().map((e, i) => (
        <li key={`${e.atMs}-${i}`} class={`event ${e.kind}`}>
          <span class="time">{clock(e.atMs)}</span> <span class="kind">{e.kind}</span> {e.message}
        </li>
      ))}
    </ul>
  );
}
