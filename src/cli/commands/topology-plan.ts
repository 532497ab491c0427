import { defineCommand } from '../options.js';
import {
  assumedLink,
  parseMachines,
  planCabling,
  type CablingPlan,
  type LinkAssumption,
} from '../../topology/index.js';
import { maxPlannedMachines } from '../../topology/machines.js';
import { TandemError } from '../../errors/index.js';

function formatBytes(n: number): string {
  return n >= 1 << 20 ? `${n / (1 << 20)} MiB` : `${n / 1024} KiB`;
}

export function formatPlan(plan: CablingPlan, link: LinkAssumption = assumedLink): string {
  const lines = [`cabling plan: ${plan.topology} for ${plan.machines.length} machine(s)`, ''];
  if (!plan.full_mesh_possible) lines.push(`a full mesh is impossible: ${plan.full_mesh_reason}`, '');
  lines.push('machines:');
  for (const m of plan.machines)
    lines.push(
      `  ${m.name.padEnd(26)} ${m.model.padEnd(22)} ${m.used}/${m.tb5_ports} Thunderbolt 5 ports used`,
    );
  lines.push('', 'connect these cables (Thunderbolt 5, port by port):');
  plan.cables.forEach((c, i) =>
    lines.push(`  ${String(i + 1).padStart(2)}. ${`${c.a} ${c.a_port}`.padEnd(36)} <-> ${c.b} ${c.b_port}`),
  );
  if (plan.cables.length === 0) lines.push('  (none)');
  lines.push(
    '',
    `max hops between two machines: ${plan.max_hops}${plan.max_hops > 1 ? ' (collectives relay through neighbours)' : ''}`,
  );
  if (plan.allreduce.length > 0) {
    lines.push(
      `expected all-reduce time (${link.gbps} GB/s and ${link.hopMicros} us per hop; measure real links with \`tandem topology\`):`,
    );
    for (const e of plan.allreduce)
      lines.push(
        `  ${formatBytes(e.bytes).padStart(8)}  ${e.algorithm.padEnd(5)} ${e.micros.toFixed(0).padStart(8)} us`,
      );
  }
  return lines.join('\n') + '\n';
}

export const command = defineCommand({
  name: 'topology plan',
  summary: 'say which Thunderbolt 5 cables to connect for a set of Macs, port by port',
  description:
    'A full mesh when every machine has a port for every other, else a ring with chords; prints the hops and the expected all-reduce time.',
  options: {
    machines: {
      type: 'string',
      description: `1 to ${maxPlannedMachines} machines, e.g. "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"`,
      required: true,
      placeholder: 'list',
    },
    bandwidth: {
      type: 'number',
      description: 'usable GB/s per cable and direction for the estimate',
      default: assumedLink.gbps,
    },
    latency: {
      type: 'number',
      description: 'microseconds per hop for the estimate',
      default: assumedLink.hopMicros,
    },
    json: { type: 'boolean', description: 'print the plan as JSON' },
  },
  examples: [
    'tandem topology plan --machines "3x macbook-pro-m4-max, 2x mac-studio-m3-ultra"',
    'tandem topology plan --machines "4x mac-mini-m4-pro" --json',
  ],
  async run({ options }) {
    if (!(options.bandwidth > 0) || !(options.latency >= 0)) {
      throw new TandemError(
        'CLI_USAGE',
        `topology plan: --bandwidth must be > 0 and --latency >= 0 (got ${options.bandwidth}, ${options.latency})`,
        {
          hint: 'pass measured figures, e.g. --bandwidth 6 --latency 10',
        },
      );
    }
    const link = { gbps: options.bandwidth, hopMicros: options.latency };
    const plan = planCabling(parseMachines(options.machines), link);
    process.stdout.write(options.json ? JSON.stringify(plan) + '\n' : formatPlan(plan, link));
    return 0;
  },
});
