import { TandemError } from '../../errors/index.js';
import type { Link } from '../model.js';
import type { NetInterface, RdmaDevice, ThunderboltPort } from './types.js';

function badOutput(tool: string, why: string): TandemError {
  return new TandemError('TOPOLOGY_BAD_PROBE_OUTPUT', `probe: cannot read the output of ${tool}: ${why}`, {
    hint: `run \`${tool}\` by hand to see what it prints, and report it if macOS changed the format`,
    details: { tool },
  });
}

/** `networksetup -listallhardwareports`: hardware port name (`Thunderbolt 1`) to device (`en2`). */
export function parseHardwarePorts(text: string): Map<string, string> {
  const ports = new Map<string, string>();
  let name: string | undefined;
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (t.startsWith('Hardware Port:')) name = t.slice('Hardware Port:'.length).trim();
    else if (t.startsWith('Device:') && name !== undefined) {
      ports.set(name, t.slice('Device:'.length).trim());
      name = undefined;
    }
  }
  return ports;
}

const speedOf = (text: unknown): number | undefined => {
  const m = typeof text === 'string' ? /([\d.]+)\s*Gb\/s/i.exec(text) : null;
  return m ? Number(m[1]) : undefined;
};

/**
 * `system_profiler SPThunderboltDataType -json`: one entry per Thunderbolt bus (receptacle) of
 * this Mac with its `domain_uuid_key`; a connected host appears in `_items` with its own
 * domain UUID, which is how two Macs' reports are matched into cables.
 */
export function parseThunderbolt(
  jsonText: string,
  hardwarePorts: ReadonlyMap<string, string> = new Map(),
): ThunderboltPort[] {
  let value: unknown;
  try {
    value = JSON.parse(jsonText);
  } catch (e) {
    throw badOutput('system_profiler SPThunderboltDataType -json', `not JSON (${(e as Error).message})`);
  }
  const buses = (value as { SPThunderboltDataType?: unknown }).SPThunderboltDataType;
  if (!Array.isArray(buses))
    throw badOutput('system_profiler SPThunderboltDataType -json', 'no SPThunderboltDataType list');
  const ports: ThunderboltPort[] = [];
  for (const bus of buses as Record<string, unknown>[]) {
    const uuid = bus.domain_uuid_key;
    const tag = bus.receptacle_1_tag as Record<string, unknown> | undefined;
    if (typeof uuid !== 'string' || !tag || typeof tag.receptacle_id_key !== 'string') continue;
    const receptacle = tag.receptacle_id_key;
    const items = Array.isArray(bus._items) ? (bus._items as Record<string, unknown>[]) : [];
    const host = items.find((i) => typeof i.domain_uuid_key === 'string');
    const port: ThunderboltPort = { receptacle, domainUuid: uuid };
    const iface = hardwarePorts.get(`Thunderbolt ${receptacle}`);
    if (iface !== undefined) port.iface = iface;
    const speed = speedOf(tag.current_speed_key);
    if (speed !== undefined) port.speedGbps = speed;
    if (host)
      port.peer = {
        domainUuid: host.domain_uuid_key as string,
        name: String(host.device_name_key ?? host._name ?? ''),
      };
    ports.push(port);
  }
  return ports.sort((a, b) => Number(a.receptacle) - Number(b.receptacle));
}

/**
 * Cables between Macs from each host's Thunderbolt ports: a port whose peer domain UUID is
 * another host's port UUID is one end of a cable (what `mlx.distributed_config` does too).
 */
export function matchThunderboltLinks(
  hosts: readonly { host: string; ports: readonly ThunderboltPort[] }[],
): Link[] {
  const owner = new Map<string, { host: string; port: ThunderboltPort }>();
  for (const h of hosts) for (const p of h.ports) owner.set(p.domainUuid, { host: h.host, port: p });
  const links: Link[] = [];
  const done = new Set<string>();
  for (const h of hosts) {
    for (const p of h.ports) {
      const other = p.peer ? owner.get(p.peer.domainUuid) : undefined;
      if (!other || other.host === h.host || done.has(p.domainUuid)) continue;
      done.add(p.domainUuid);
      done.add(other.port.domainUuid);
      const speed = Math.min(p.speedGbps ?? Infinity, other.port.speedGbps ?? Infinity);
      const link: Link = {
        a: h.host,
        aPort: p.iface ?? `tb${p.receptacle}`,
        b: other.host,
        bPort: other.port.iface ?? `tb${other.port.receptacle}`,
        kind: speed >= 80 ? 'tb5' : speed < Infinity ? 'tb4' : 'unknown',
      };
      if (speed < Infinity) link.speedGbps = speed;
      links.push(link);
    }
  }
  return links;
}

/** `ifconfig` (all interfaces, or one such as `ifconfig bridge0`): flags, MTU, addresses, status and bridge members. */
export function parseIfconfig(text: string): NetInterface[] {
  const out: NetInterface[] = [];
  let cur: NetInterface | undefined;
  for (const line of text.split('\n')) {
    const head = /^([A-Za-z0-9._-]+): flags=\w+<([^>]*)>(?:.*\bmtu (\d+))?/.exec(line);
    if (head) {
      const flags = (head[2] as string).split(',');
      const name = head[1] as string;
      cur = {
        name,
        up: flags.includes('UP'),
        kind: flags.includes('LOOPBACK') ? 'loopback' : name.startsWith('bridge') ? 'bridge' : 'unknown',
        ipv4: [],
        ipv6LinkLocal: [],
      };
      if (head[3] !== undefined) cur.mtu = Number(head[3]);
      out.push(cur);
      continue;
    }
    if (!cur) continue;
    const t = line.trim();
    let m: RegExpExecArray | null;
    if ((m = /^inet (\d+\.\d+\.\d+\.\d+)/.exec(t))) cur.ipv4.push(m[1] as string);
    else if ((m = /^inet6 (fe80:[0-9a-f:]+)/i.exec(t))) cur.ipv6LinkLocal.push(m[1] as string);
    else if ((m = /^ether ([0-9a-f:]+)/i.exec(t))) cur.mac = m[1] as string;
    else if ((m = /^status: (\w+)/.exec(t))) cur.carrier = m[1] === 'active';
    else if ((m = /^member: (\S+)/.exec(t))) (cur.members ??= []).push(m[1] as string);
  }
  return out;
}

/** `rdma_ctl status`: whether RDMA over Thunderbolt is switched on. */
export function parseRdmaCtlStatus(text: string): boolean | undefined {
  if (/\bdisabled\b/i.test(text)) return false;
  if (/\benabled\b/i.test(text)) return true;
  return undefined;
}

/** `ibv_devices`: device names (`rdma_en2`) below the header. */
export function parseIbvDevices(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((w) => w !== '' && w !== 'device' && !/^-+$/.test(w));
}

/** `ibv_devinfo`: per device its transport and each port's state, MTU and link layer. */
export function parseIbvDevinfo(text: string): RdmaDevice[] {
  const devices: RdmaDevice[] = [];
  let dev: RdmaDevice | undefined;
  for (const line of text.split('\n')) {
    const [rawKey, ...rest] = line.trim().split(':');
    const key = rawKey?.trim() ?? '';
    const value = rest.join(':').trim();
    if (key === 'hca_id') {
      dev = { name: value, ports: [] };
      if (value.startsWith('rdma_')) dev.netdev = value.slice(5);
      devices.push(dev);
    } else if (!dev) continue;
    else if (key === 'transport') dev.transport = value;
    else if (key === 'port') dev.ports.push({ port: Number(value), state: '', active: false });
    else {
      const port = dev.ports[dev.ports.length - 1];
      if (!port) continue;
      if (key === 'state') {
        port.state = value.split(/\s+/)[0] ?? '';
        port.active = port.state === 'PORT_ACTIVE';
      } else if (key === 'active_mtu') port.activeMtu = Number(value.split(/\s+/)[0]);
      else if (key === 'link_layer') port.linkLayer = value;
    }
  }
  return devices;
}
