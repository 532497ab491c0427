import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { NetInterface, RdmaDevice } from './types.js';

const read = (path: string): string | undefined => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined; // absent or unreadable (e.g. `speed` of a link that is down): the caller leaves the field out
  }
};

const list = (path: string): string[] => {
  try {
    return readdirSync(path).sort();
  } catch {
    return [];
  }
};

/** The driver behind an interface (`thunderbolt-net`, `veth`, `e1000e`), from the `device/driver` link. */
function driverOf(dir: string): string | undefined {
  try {
    return readlinkSync(join(dir, 'device', 'driver'))
      .split('/')
      .pop();
  } catch {
    return undefined;
  }
}

/**
 * Interfaces from `/sys/class/net` (or a copy of it under `root` for tests): state, MTU,
 * speed (`speed` is in Mb/s, -1 or unreadable when unknown), kind and bridge membership.
 * Addresses are not in sysfs; `probeHost` adds them from `os.networkInterfaces()`.
 */
export function readLinuxInterfaces(root = '/sys/class/net'): NetInterface[] {
  return list(root).map((name) => {
    const dir = join(root, name);
    const type = Number(read(join(dir, 'type')) ?? '1');
    const driver = driverOf(dir);
    const kind: NetInterface['kind'] =
      type === 772
        ? 'loopback'
        : existsSync(join(dir, 'bridge'))
          ? 'bridge'
          : existsSync(join(dir, 'wireless'))
            ? 'wifi'
            : driver === 'thunderbolt-net'
              ? 'tb4'
              : 'ethernet';
    const operstate = read(join(dir, 'operstate'));
    const flags = Number(read(join(dir, 'flags')) ?? '0');
    const iface: NetInterface = {
      name,
      up: (flags & 1) === 1 || operstate === 'up',
      kind,
      ipv4: [],
      ipv6LinkLocal: [],
    };
    const carrier = read(join(dir, 'carrier'));
    if (carrier !== undefined) iface.carrier = carrier === '1';
    else if (operstate !== undefined && operstate !== 'unknown') iface.carrier = operstate === 'up';
    const mtu = Number(read(join(dir, 'mtu')));
    if (Number.isFinite(mtu) && mtu > 0) iface.mtu = mtu;
    const speed = Number(read(join(dir, 'speed')));
    if (Number.isFinite(speed) && speed > 0) iface.speedGbps = speed / 1000;
    const mac = read(join(dir, 'address'));
    if (mac) iface.mac = mac;
    if (kind === 'bridge') iface.members = list(join(dir, 'brif'));
    return iface;
  });
}

/**
 * Verbs devices from `/sys/class/infiniband`: ports with state (`4: ACTIVE`), link layer and
 * the network interface behind the device (`device/net/<name>`, or the `ports/<n>/gid_attrs`
 * ndevs for soft devices such as rxe).
 */
export function readLinuxRdma(root = '/sys/class/infiniband'): RdmaDevice[] {
  return list(root).map((name) => {
    const dir = join(root, name);
    const dev: RdmaDevice = { name, ports: [] };
    const nodeType = read(join(dir, 'node_type'));
    if (nodeType) dev.transport = nodeType;
    const netdev =
      list(join(dir, 'device', 'net'))[0] ?? read(join(dir, 'ports', '1', 'gid_attrs', 'ndevs', '0'));
    if (netdev) dev.netdev = netdev;
    for (const p of list(join(dir, 'ports'))) {
      const state = read(join(dir, 'ports', p, 'state')) ?? '';
      const word = state.split(':').pop()?.trim() ?? '';
      const port = { port: Number(p), state: word, active: word === 'ACTIVE' };
      const layer = read(join(dir, 'ports', p, 'link_layer'));
      dev.ports.push(layer ? { ...port, linkLayer: layer } : port);
    }
    return dev;
  });
}
