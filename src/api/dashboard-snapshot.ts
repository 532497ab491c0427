// What GET /v1/dashboard/events sends. Only type imports from dependency-free files: the
// dashboard (web/, built for the browser) reads the same file.
import type { ClusterView } from '../cluster/cluster-view.js';

/** What GET /v1/dashboard/events pushes once a second (docs/dashboard.md lists the fields). */
export interface DashboardSnapshot {
  /** Unix milliseconds the snapshot was taken. */
  at_ms: number;
  status: 'loading' | 'ready' | 'failed' | 'closing';
  /** The served model's name; null until it is loaded. */
  model: string | null;
  /** Tokens generated since the server started (the same count as tandem:generation_tokens_total). */
  generated_tokens_total: number;
  prompt_tokens_total: number;
  /** Tokens generated per second over the last `rate_window_s` seconds (or since the stream began). */
  tokens_per_s: number;
  rate_window_s: number;
  /** Time to first token of the latest requests, oldest first. */
  recent_ttfts: { at_ms: number; ttft_s: number }[];
  queue_depth: number;
  running: number;
  slots: number;
  /** Members, placement and events, as GET /v1/cluster; null until the model is loaded. */
  cluster: ClusterView | null;
}
