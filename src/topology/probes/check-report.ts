import { TandemError } from '../../errors/index.js';
import type { HostReport } from './types.js';

type Check = (value: unknown, path: string) => void;

const describe = (v: unknown): string =>
  v === null
    ? 'null'
    : Array.isArray(v)
      ? 'an array'
      : typeof v === 'object'
        ? 'an object'
        : JSON.stringify(v);

class ShapeError {
  constructor(
    readonly path: string,
    readonly expected: string,
    readonly got: unknown,
  ) {}
}

const need = (ok: boolean, value: unknown, path: string, expected: string): void => {
  if (!ok) throw new ShapeError(path, expected, value);
};
const str: Check = (v, p) => need(typeof v === 'string', v, p, 'a string');
const num: Check = (v, p) => need(typeof v === 'number' && Number.isFinite(v), v, p, 'a number');
const bool: Check = (v, p) => need(typeof v === 'boolean', v, p, 'true or false');
const optional =
  (check: Check): Check =>
  (v, p) => {
    if (v !== undefined) check(v, p);
  };
const list =
  (item: Check): Check =>
  (v, p) => {
    need(Array.isArray(v), v, p, 'an array');
    (v as unknown[]).forEach((x, i) => item(x, `${p}[${i}]`));
  };
const object =
  (fields: Record<string, Check>): Check =>
  (v, p) => {
    need(typeof v === 'object' && v !== null && !Array.isArray(v), v, p || 'the report', 'an object');
    for (const [k, check] of Object.entries(fields))
      check((v as Record<string, unknown>)[k], p ? `${p}.${k}` : k);
  };

/** The fields doctor reads of a HostReport (probes/types.ts); extra fields are allowed. */
const hostReport = object({
  host: str,
  platform: str,
  tandemVersion: str,
  timeMs: num,
  interfaces: list(
    object({
      name: str,
      up: bool,
      carrier: optional(bool),
      mtu: optional(num),
      kind: str,
      speedGbps: optional(num),
      ipv4: list(str),
      ipv6LinkLocal: list(str),
      members: optional(list(str)),
    }),
  ),
  rdma: object({
    enabled: optional(bool),
    devices: list(
      object({
        name: str,
        netdev: optional(str),
        ports: list(object({ port: num, state: str, active: bool, activeMtu: optional(num) })),
      }),
    ),
  }),
  thunderbolt: list(
    object({
      receptacle: str,
      iface: optional(str),
      speedGbps: optional(num),
      peer: optional(object({ domainUuid: str, name: str })),
    }),
  ),
  notes: list(str),
});

/**
 * `value` as a HostReport, or INVALID_ARGUMENT naming `source` and the first field that is
 * missing or of the wrong type. Reports come from other hosts' `tandem doctor --report`
 * (files or ssh), so doctor checks their shape before reading them.
 */
export function checkHostReport(value: unknown, source: string): HostReport {
  try {
    hostReport(value, '');
  } catch (e) {
    if (!(e instanceof ShapeError)) throw e;
    const got = e.got === undefined ? 'it is missing' : `got ${describe(e.got)}`;
    throw new TandemError(
      'INVALID_ARGUMENT',
      `${source} is not a host report: ${e.path} must be ${e.expected} (${got})`,
      {
        hint: 'pass the JSON printed by `tandem doctor --report` on that host, run with the same tandem version',
        details: { source, field: e.path, expected: e.expected },
      },
    );
  }
  return value as HostReport;
}
