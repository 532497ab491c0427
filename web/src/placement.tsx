import type { ClusterView } from './types.js';

/** Which member holds which layers, heads or experts; or why nothing is placed. */
export function Placement({ cluster }: { cluster: ClusterView }) {
  const p = cluster.placement;
  if (!p) return <p class="waiting">placed nowhere: {cluster.waiting ?? 'waiting for members'}</p>;
  return (
    <div>
      <p class="muted">
        {p.parallel} over {p.provider} · placements {cluster.placements} · re-placements{' '}
        {cluster.replacements}
      </p>
      <table class="placement">
        <tbody>
          {p.ranks.map((r) => (
            <tr key={r.id}>
              <td>{r.id}</td>
              <td>{r.holds}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
