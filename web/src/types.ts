// What the server sends, as the page reads it: DashboardSnapshot (src/api/dashboard-feed.ts)
// and ClusterView (src/cluster/serving-cluster.ts). The page is built apart from the server's
// code (browser, not Node), so the shapes are restated here; docs/dashboard.md lists them.

export interface MemberView {
  id: string;
  address: string;
  pid: number | null;
  state: 'joining' | 'alive' | 'dead';
  memory_bytes: number | null;
  speed: number | null;
  last_heartbeat_ms: number;
}

export interface ClusterEvent {
  kind: 'joined' | 'lost' | 'replaced' | 'no-placement';
  atMs: number;
  message: string;
}

export interface ClusterView {
  members: MemberView[];
  links: unknown[];
  placement: { parallel: string; provider: string; ranks: { id: string; holds: string }[] } | null;
  waiting: string | null;
  placements: number;
  replacements: number;
  events: ClusterEvent[];
}

export interface Snapshot {
  at_ms: number;
  status: 'loading' | 'ready' | 'failed' | 'closing';
  model: string | null;
  generated_tokens_total: number;
  prompt_tokens_total: number;
  tokens_per_s: number;
  rate_window_s: number;
  recent_ttfts: { at_ms: number; ttft_s: number }[];
  queue_depth: number;
  running: number;
  slots: number;
  cluster: ClusterView | null;
}
