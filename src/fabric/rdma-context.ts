import { readFileSync } from 'node:fs';
import { TandemError } from '../errors/index.js';
import { IBV } from './rdma-verbs-enums.js';
import { loadVerbs, verbsProblem, type ContextOps, type Verbs } from './rdma-verbs.js';

/**
 * One open verbs device: its attributes, port 1, its GID table, and the objects made on it
 * (protection domains, memory regions, completion queues, queue pairs) as raw handles. The
 * rdma provider builds the fabric's objects on top of this; every call that fails throws a
 * TandemError naming the verb and errno.
 */

export interface RdmaDeviceAttr {
  maxQpWr: number;
  maxSge: number;
  maxCqe: number;
  maxMr: number;
  maxQpRdAtom: number;
  physPortCnt: number;
}

export interface RdmaPortAttr {
  state: number;
  /** Active MTU as verbs' enum (1: 256 B ... 5: 4096 B). */
  activeMtu: number;
  gidTableLength: number;
  linkLayer: 'infiniband' | 'ethernet' | 'unspecified';
}

/** A GID table entry with its RoCE type from sysfs ("RoCE v2", "IB/RoCE v1") where Linux says it. */
export interface GidEntry {
  index: number;
  gid: Uint8Array;
  /** The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else undefined. */
  ipv4?: string | undefined;
  type?: string | undefined;
}

/** The GID chosen for a peer, and why (devinfo shows both). */
export interface GidChoice {
  index: number;
  gid: Uint8Array;
  reason: string;
}

export function mtuBytes(mtu: number): number {
  return mtu >= 1 && mtu <= 5 ? 128 << mtu : 0;
}

export function fail(verbs: Verbs, what: string, hint: string): never {
  const errno = verbs.errno();
  throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `${what} failed${errno ? ` (errno ${errno})` : ''}`, {
    hint,
  });
}

/** Picks the GID for traffic to a peer: the RoCE v2 IPv4-mapped entry of `localIpv4`, else the first v2 one. */
export function chooseGid(entries: readonly GidEntry[], localIpv4?: string): GidChoice | undefined {
  const v2 = (e: GidEntry): boolean => e.type === undefined || /v2/i.test(e.type);
  const exact = entries.find((e) => e.ipv4 !== undefined && e.ipv4 === localIpv4 && v2(e));
  if (exact) return { ...exact, reason: `RoCE v2 IPv4-mapped GID of ${localIpv4}` };
  const mapped = entries.find((e) => e.ipv4 !== undefined && v2(e));
  if (mapped) {
    const why = localIpv4 ? `no GID carries ${localIpv4}; ` : '';
    return { ...mapped, reason: `${why}first RoCE v2 IPv4-mapped GID (${mapped.ipv4})` };
  }
  const any = entries.find((e) => e.gid.some((b) => b !== 0));
  return any
    ? { ...any, reason: 'no IPv4-mapped GID: first non-zero GID (InfiniBand or RoCE v1)' }
    : undefined;
}

/** The IPv4 address inside an IPv4-mapped GID, else undefined. */
export function gidIpv4(gid: Uint8Array): string | undefined {
  for (let i = 0; i < 10; i++) if (gid[i] !== 0) return undefined;
  if (gid[10] !== 0xff || gid[11] !== 0xff) return undefined;
  return `${gid[12]}.${gid[13]}.${gid[14]}.${gid[15]}`;
}

export class RdmaContext {
  readonly ops: ContextOps;
  readonly attr: RdmaDeviceAttr;
  readonly port: RdmaPortAttr;
  readonly portNum = 1;
  private closed = false;

  private constructor(
    readonly verbs: Verbs,
    readonly name: string,
    readonly ctx: bigint,
  ) {
    this.ops = verbs.contextOps(ctx);
    this.attr = this.queryDevice();
    this.port = this.queryPort();
  }

  /** Opens the device `name` (default: the first one). */
  static open(name?: string): RdmaContext {
    const { verbs, pick } = selectDevice(name);
    const num = [0];
    const list = verbs.fn.ibv_get_device_list(num);
    try {
      const devices = readPointers(verbs, list, num[0] ?? 0);
      const ctx = verbs.fn.ibv_open_device(devices[pick.index] ?? 0n);
      if (ctx === 0n) fail(verbs, `ibv_open_device(${pick.name})`, 'check /dev/infiniband permissions');
      return new RdmaContext(verbs, pick.name, ctx);
    } finally {
      if (list !== 0n) verbs.fn.ibv_free_device_list(list);
    }
  }

  private queryDevice(): RdmaDeviceAttr {
    const L = this.verbs.layout;
    const b = new Uint8Array(L.size('ibv_device_attr'));
    if (this.verbs.fn.ibv_query_device(this.ctx, b) !== 0)
      fail(this.verbs, `ibv_query_device(${this.name})`, 'the device is unusable');
    const v = new DataView(b.buffer);
    const i32 = (f: string): number => v.getInt32(L.offset('ibv_device_attr', f), true);
    return {
      maxQpWr: i32('max_qp_wr'),
      maxSge: i32('max_sge'),
      maxCqe: i32('max_cqe'),
      maxMr: i32('max_mr'),
      maxQpRdAtom: i32('max_qp_rd_atom'),
      physPortCnt: b[L.offset('ibv_device_attr', 'phys_port_cnt')] ?? 0,
    };
  }

  private queryPort(): RdmaPortAttr {
    const L = this.verbs.layout;
    const b = new Uint8Array(L.size('ibv_port_attr'));
    if (this.verbs.fn.ibv_query_port(this.ctx, this.portNum, b) !== 0)
      fail(this.verbs, `ibv_query_port(${this.name}, ${this.portNum})`, 'the port is unusable');
    const v = new DataView(b.buffer);
    const ll = b[L.offset('ibv_port_attr', 'link_layer')];
    return {
      state: v.getInt32(0, true),
      activeMtu: v.getInt32(L.offset('ibv_port_attr', 'active_mtu'), true),
      gidTableLength: v.getInt32(L.offset('ibv_port_attr', 'gid_tbl_len'), true),
      linkLayer:
        ll === IBV.LINK_LAYER_ETHERNET
          ? 'ethernet'
          : ll === IBV.LINK_LAYER_INFINIBAND
            ? 'infiniband'
            : 'unspecified',
    };
  }

  /** The port's GID table (non-zero entries), with RoCE types from sysfs on Linux. */
  gids(): GidEntry[] {
    const out: GidEntry[] = [];
    for (let index = 0; index < Math.min(this.port.gidTableLength, 256); index++) {
      const gid = new Uint8Array(16);
      if (this.verbs.fn.ibv_query_gid(this.ctx, this.portNum, index, gid) !== 0) continue;
      if (gid.every((x) => x === 0)) continue;
      const entry: GidEntry = { index, gid, ipv4: gidIpv4(gid) };
      const type = readGidType(this.name, this.portNum, index);
      if (type !== undefined) entry.type = type;
      out.push(entry);
    }
    return out;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.verbs.fn.ibv_close_device(this.ctx);
  }
}

/** The devices' names, in the library's order. */
/**
 * The verbs library and the device `name` (default: the first one), or the typed error that
 * says why the rdma provider cannot open it here: no library, no device, no device of that name.
 */
function selectDevice(name: string | undefined): { verbs: Verbs; pick: { index: number; name: string } } {
  const verbs = loadVerbs();
  if (!verbs) {
    throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `rdma is unavailable: ${verbsProblem()}`, {
      hint: 'use --provider tcp, or install the RDMA stack (tandem devinfo says what is missing)',
    });
  }
  const names = listDevices(verbs);
  const pick = name === undefined ? names[0] : names.find((d) => d.name === name);
  if (pick === undefined) {
    const here = names.map((d) => d.name).join(', ') || 'none';
    throw new TandemError(
      'FABRIC_PROVIDER_UNAVAILABLE',
      name === undefined
        ? 'no RDMA device is present (the verbs library loaded, but it lists no device: this host has no RDMA NIC, or its kernel no RDMA support)'
        : `no RDMA device named ${name} (TANDEM_RDMA_DEVICE or the caller's choice)`,
      {
        hint: `devices here: ${here} (tandem devinfo); use --provider tcp (shm between processes of one host), or bring a device up (soft-RoCE: rdma link add rxe0 type rxe netdev IFACE)`,
      },
    );
  }
  return { verbs, pick };
}

/**
 * Why `openDevice('rdma')` would fail here for the device `name` (default: TANDEM_RDMA_DEVICE,
 * else the first one), as its typed error; undefined when a device is there to open. Commands
 * check it once before they start local processes, so a missing device is one error up front.
 */
export function rdmaUnavailable(name = process.env.TANDEM_RDMA_DEVICE): TandemError | undefined {
  try {
    selectDevice(name);
    return undefined;
  } catch (e) {
    if (e instanceof TandemError) return e;
    throw e;
  }
}

export function listDevices(verbs: Verbs): { index: number; name: string }[] {
  const num = [0];
  const list = verbs.fn.ibv_get_device_list(num);
  if (list === 0n) return [];
  try {
    return readPointers(verbs, list, num[0] ?? 0).map((p, index) => ({
      index,
      name: verbs.fn.ibv_get_device_name(p),
    }));
  } finally {
    verbs.fn.ibv_free_device_list(list);
  }
}

function readPointers(verbs: Verbs, list: bigint, count: number): bigint[] {
  const out: bigint[] = [];
  for (let i = 0; i < count; i++) out.push(verbs.readPointer(list, i * 8));
  return out;
}

function readGidType(device: string, port: number, index: number): string | undefined {
  try {
    const t = readFileSync(`/sys/class/infiniband/${device}/ports/${port}/gid_attrs/types/${index}`, 'utf8');
    return t.trim() || undefined;
  } catch {
    return undefined;
  }
}
