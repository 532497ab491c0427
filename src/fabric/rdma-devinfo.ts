import { networkInterfaces } from 'node:os';
import { chooseGid, listDevices, mtuBytes, RdmaContext, type GidEntry } from './rdma-context.js';
import { regionsInUse } from './rdma-memory.js';
import { IBV } from './rdma-verbs-enums.js';
import { loadVerbs } from './rdma-verbs.js';

/** One RDMA device as `tandem devinfo` shows it. */
export interface RdmaDeviceInfo {
  device: string;
  port: number;
  state: 'active' | 'down';
  mtu: number;
  linkLayer: string;
  gids: { index: number; gid: string; type?: string | undefined; ipv4?: string | undefined }[];
  /** The GID a connection would use, and why; undefined where none is usable. */
  chosenGid?: { index: number; reason: string } | undefined;
  /** Memory regions the device allows (max_mr); a registration pool keeps far below it. */
  regionCap: number;
  /** Regions this process holds on the device now (a registration pool keeps it to a few slabs). */
  regionsInUse: number;
  maxQpWr: number;
  maxSge: number;
  error?: string;
}

/** The RDMA devices and their port 1, or [] where there is no library or device. */
export function describeRdmaDevices(): RdmaDeviceInfo[] {
  const verbs = loadVerbs();
  if (!verbs) return [];
  const out: RdmaDeviceInfo[] = [];
  for (const { name } of listDevices(verbs)) {
    let ctx: RdmaContext | undefined;
    try {
      ctx = RdmaContext.open(name);
      const gids = ctx.gids();
      const chosen = chooseGid(gids, localIpv4Of(gids));
      out.push({
        device: name,
        port: ctx.portNum,
        state: ctx.port.state === IBV.PORT_ACTIVE ? 'active' : 'down',
        mtu: mtuBytes(ctx.port.activeMtu),
        linkLayer: ctx.port.linkLayer,
        gids: gids.map((g) => ({ index: g.index, gid: formatGid(g.gid), type: g.type, ipv4: g.ipv4 })),
        chosenGid: chosen ? { index: chosen.index, reason: chosen.reason } : undefined,
        regionCap: ctx.attr.maxMr,
        regionsInUse: regionsInUse(name),
        maxQpWr: ctx.attr.maxQpWr,
        maxSge: ctx.attr.maxSge,
      });
    } catch (e) {
      out.push({
        device: name,
        port: 1,
        state: 'down',
        mtu: 0,
        linkLayer: 'unspecified',
        gids: [],
        regionCap: 0,
        regionsInUse: regionsInUse(name),
        maxQpWr: 0,
        maxSge: 0,
        error: (e as Error).message,
      });
    } finally {
      ctx?.close();
    }
  }
  return out;
}

/** A GID as 8 groups of 4 hex digits (ibv_devinfo's form). */
export function formatGid(gid: Uint8Array): string {
  const parts: string[] = [];
  for (let i = 0; i < 16; i += 2)
    parts.push((((gid[i] ?? 0) << 8) | (gid[i + 1] ?? 0)).toString(16).padStart(4, '0'));
  return parts.join(':');
}

/** The first of this host's IPv4 addresses that one of the GIDs carries (devinfo has no peer). */
function localIpv4Of(gids: readonly GidEntry[]): string | undefined {
  const mine = new Set<string>();
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) mine.add(a.address);
  return gids.find((g) => g.ipv4 !== undefined && mine.has(g.ipv4))?.ipv4;
}

/** The devinfo lines of one device. */
export function rdmaDeviceLines(d: RdmaDeviceInfo): string[] {
  if (d.error) return [`  ${d.device}: ${d.error}`];
  const lines = [
    `  ${d.device} port ${d.port}: ${d.state}, ${d.linkLayer}, MTU ${d.mtu}, regions cap ${d.regionCap} (${d.regionsInUse} in use here), ` +
      `queue depth ${d.maxQpWr}, SGEs ${d.maxSge}`,
  ];
  for (const g of d.gids)
    lines.push(`    GID ${g.index} ${g.gid}${g.type ? ` (${g.type})` : ''}${g.ipv4 ? ` ${g.ipv4}` : ''}`);
  lines.push(
    d.chosenGid
      ? `    chosen GID ${d.chosenGid.index}: ${d.chosenGid.reason}`
      : '    no usable GID on this port',
  );
  return lines;
}
