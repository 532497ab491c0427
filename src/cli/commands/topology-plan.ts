import { defineCommand } from '../options.js';
import { parseMachines, planCabling, type CablingPlan } from '../../topology/index.js';

function formatBytes(n: number): string {
  return n >= 1 << 20 ? `${n / (1 << 20)} MiB` : `${n / 1024} KiB`;
}

export function formatPlan(plan: CablingPlan): string {
  const lines = [`cabling plan: ${plan.topology} for ${plan.machines.length} machine(s)`, ''];
  if (!plan.full_mesh_possible) lines.push(`a full mesh is impossible: ${plan.full_mesh_reason}`, '');
  lines.push('machines:');
  for (const m of plan.machines) lines.push(`  ${m.name.padEnd(26)} ${m.model.padEnd(22)} ${m.used}/${m.tb5_ports} Thunderbolt 5 ports used`);
  lines.push('', 'connect these cables (Thunderbolt 5, port by port):');
  plan.cables.forEach((c, i) => lines.push(`  ${String(i + 1).padStart(2)}. ${`${c.a} ${c.a_port}`.padEnd(36)} <-> ${c.b} ${c.b_port}`));
  if (plan.cables.length === 0) lines.push('  (none)');
  lines.push('', `max hops between two machines: ${plan.max_hops}${plan.max_hops > 1 ? ' (collectives relay through neighbours)' : ''}`);
  if (plan.allreduce.length > 0) {
    lines.push('expected all-reduce time (assumed 6 GB/s and 10 us per TB5 hop; measure with `tandem topology`):');
    for (const e of plan.allreduce) lines.push(`  ${formatBytes(e.bytes).padStart(8)}  ${e.algorithm.padEnd(5)} ${e.micros.toFixed(0).padStart(8)} us`);
  }
  return lines.join('\n') + '\n';
}

export const command = defineCommand({
  name: 'topology plan',
  summary: 'say which Thunderbolt 5 cables to connect for a set of Macs, port by port',
  description:
    'A full mesh when every machine has a port for every other, else a ring with chords; prints the hops and the expected all-reduce time.',
  options: {
    machines: { type: 'string', description: 'machines, e.g. "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"', required: true, placeholder: 'list' },
    json: { type: 'boolean', description: 'print the plan as JSON' },
  },
  examples: ['tandem topology plan --machines "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"', 'tandem topology plan --machines "4x mac-mini-m4-pro" --json'],
  async run({ options }) {
    const plan = planCabling(parseMachines(options.machines));
    process.stdout.write(options.json ? JSON.stringify(plan) + '\n' : formatPlan(plan));
    return 0;
  },
});
