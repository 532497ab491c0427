import { probeProviders } from '../../fabric/index.js';
import { defineCommand } from '../options.js';

export const command = defineCommand({
  name: 'devinfo',
  summary: 'list the fabric providers on this machine and their state (like ibv_devinfo)',
  description:
    'Rows: loopback (in-process), shm (processes on one host), tcp (any hosts) and rdma (hardware; says why it is unavailable).',
  options: {
    json: {
      type: 'boolean',
      description: 'one JSON object per provider per line: {"provider","available","detail"}',
    },
  },
  examples: ['tandem devinfo', 'tandem devinfo --json'],
  async run({ options }) {
    const rows = probeProviders();
    if (options.json) {
      for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
      return 0;
    }
    const lines = ['provider  state        detail'];
    for (const r of rows)
      lines.push(
        `${r.provider.padEnd(9)} ${(r.available ? 'available' : 'unavailable').padEnd(12)} ${r.detail}`,
      );
    process.stdout.write(lines.join('\n') + '\n');
    return 0;
  },
});
