// What the server sends, as the page reads it: the server's own declarations, imported as
// types only (erased at build time; those files import nothing that needs Node).
export type { ClusterEvent, ClusterView, LinkView, MemberView } from '../../src/cluster/cluster-view.js';
export type { DashboardSnapshot as Snapshot } from '../../src/api/dashboard-snapshot.js';
