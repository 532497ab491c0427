import { shareText } from '../../src/cluster/view-format.js';
import { bytes } from './format.js';
import type { MemberView } from './types.js';

/**
 * One row per member: id, address, pid, state, memory (bar against the largest), its compute
 * and communication shares of each token, and heartbeat age.
 */
export function MembersTable({ members }: { members: MemberView[] }) {
  const maxMemory = Math.max(1, ...members.map((m) => m.memory_bytes ?? 0));
  return (
    <table class="members">
      <thead>
        <tr>
          <th>id</th>
          <th>address</th>
          <th>pid</th>
          <th>state</th>
          <th>memory</th>
          <th>compute</th>
          <th>comm</th>
          <th>heard</th>
        </tr>
      </thead>
      <tbody>
        {members.map((m) => (
          <tr key={m.id} class={m.state} data-member={m.id}>
            <td>{m.id}</td>
            <td>{m.address}</td>
            <td>{m.pid ?? '-'}</td>
            <td class="state">{m.state}</td>
            <td>
              <div class="membar">
                <div style={{ width: `${(100 * (m.memory_bytes ?? 0)) / maxMemory}%` }} />
              </div>
              {m.memory_bytes !== null ? bytes(m.memory_bytes) : '-'}
            </td>
            <td class="compute">{shareText(m.compute_share)}</td>
            <td class="comm">{shareText(m.comm_share)}</td>
            <td>{m.last_heartbeat_ms} ms ago</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
