import { probeProviders } from '../../fabric/index.js';
import { describeRdmaDevices, rdmaDeviceLines } from '../../fabric/rdma-devinfo.js';
import { defineCommand } from '../options.js';

export const command = defineCommand({
  name: 'devinfo',
  summary: 'list the fabric providers on this machine and their state (like ibv_devinfo)',
  description:
    'Rows: loopback (in-process), shm (processes on one host), tcp (any hosts) and rdma (hardware; says why it is unavailable). Then each RDMA device: port state, link layer, MTU, the region cap, its GIDs and the one a connection uses, with the reason.',
  options: {
    json: {
      type: 'boolean',
      description:
        'one JSON object per provider per line: {"provider","available","detail"}; then one per RDMA device: {"provider":"rdma","device","port","state","mtu","linkLayer","gids","chosenGid","regionCap",...}',
    },
  },
  examples: ['tandem devinfo', 'tandem devinfo --json'],
  async run({ options }) {
    const rows = probeProviders();
    const rdma = describeRdmaDevices();
    if (options.json) {
      for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
      for (const d of rdma) process.stdout.write(JSON.stringify({ provider: 'rdma', ...d }) + '\n');
      return 0;
    }
    const lines = ['provider  state        detail'];
    for (const r of rows)
      lines.push(
        `${r.provider.padEnd(9)} ${(r.available ? 'available' : 'unavailable').padEnd(12)} ${r.detail}`,
      );
    if (rdma.length > 0) lines.push('', 'rdma devices:', ...rdma.flatMap(rdmaDeviceLines));
    process.stdout.write(lines.join('\n') + '\n');
    return 0;
  },
});
