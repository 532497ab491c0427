import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { networkInterfaces, platform } from 'node:os';
import type { LinkKind } from '../model.js';
import type { HostReport } from '../probes/types.js';

/** Interfaces that never carry a cluster cable (loopback, tunnels, Apple's peer-to-peer Wi-Fi, bridges). */
const ignored = /^(lo\d*|bridge\d*|utun\d*|awdl\d*|llw\d*|anpi\d*|ap\d*|gif\d*|stf\d*|docker\d*|virbr\d*)$/;

/**
 * Interfaces a discovery agent announces on: link up with carrier, not loopback or a bridge.
 * On Linux from /sys/class/net (a link without an address yet still counts: its IPv6
 * link-local address appears moments later); elsewhere from interfaces with a link-local address.
 */
export function usableInterfaces(only?: readonly string[]): string[] {
  let names: string[];
  if (platform() === 'linux' && existsSync('/sys/class/net')) {
    names = readdirSync('/sys/class/net').filter((n) => {
      if (ignored.test(n) || existsSync(`/sys/class/net/${n}/bridge`)) return false;
      try {
        return readFileSync(`/sys/class/net/${n}/operstate`, 'utf8').trim() === 'up';
      } catch {
        return false; // the interface vanished between readdir and read
      }
    });
  } else {
    const all = networkInterfaces();
    names = Object.keys(all).filter(
      (n) =>
        !ignored.test(n) &&
        (all[n] ?? []).some((a) => !a.internal && a.family === 'IPv6' && a.address.startsWith('fe80')),
    );
  }
  return (only && only.length > 0 ? names.filter((n) => only.includes(n)) : names).sort();
}

/** Kind and line rate of each interface, from a host probe, for the agent's `interfaceInfo`. */
export function interfaceInfoFrom(
  report: HostReport,
): (iface: string) => { kind?: LinkKind; speedGbps?: number } | undefined {
  const byName = new Map(report.interfaces.map((i) => [i.name, i]));
  return (iface) => {
    const i = byName.get(iface);
    if (!i || i.kind === 'bridge') return undefined;
    const kind: LinkKind = i.kind === 'unknown' ? 'ethernet' : i.kind;
    return i.speedGbps === undefined ? { kind } : { kind, speedGbps: i.speedGbps };
  };
}
