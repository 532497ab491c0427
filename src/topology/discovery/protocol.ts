import type { LinkKind } from '../model.js';
import { mac, macEqual } from './secret.js';

/** A cable as one end sees it: my interface, and who answers behind it on which of theirs. */
export interface LocalLink {
  iface: string;
  peer: string;
  peerIface: string;
  /** What this end's interface is (from the host's probe), and its line rate. */
  kind?: LinkKind;
  speedGbps?: number;
  latencyUs?: number;
  bandwidthGBps?: number;
}

/** One host's own links, flooded to everyone (link state); newest (boot, seq) wins. */
export interface HostView {
  host: string;
  /** Random per agent start, so a restarted agent's counter is not taken for an old one. */
  boot: string;
  seq: number;
  /** Hash of the graph as this host currently sees it, to tell when all hosts agree. */
  graphHash: string;
  links: LocalLink[];
  /** A free-form phase (`init` uses `verified`), so hosts can wait for each other. */
  state?: string;
}

/** What an agent announces on each interface every interval. */
export interface Hello {
  v: 1;
  host: string;
  /** The interface the hello was sent on. */
  iface: string;
  ts: number;
  views: HostView[];
}

const macBytes = 32;

/** Wire form: HMAC-SHA256(secret, json) followed by the JSON. */
export function encodeHello(secret: Buffer, hello: Hello): Buffer {
  const body = Buffer.from(JSON.stringify(hello));
  return Buffer.concat([mac(secret, 'tandem-hello', body), body]);
}

/** Checks the MAC and the shape; returns undefined for anything not sent by a holder of the secret. */
export function decodeHello(secret: Buffer, packet: Buffer): Hello | undefined {
  if (packet.length <= macBytes) return undefined;
  const body = packet.subarray(macBytes);
  if (!macEqual(packet.subarray(0, macBytes), mac(secret, 'tandem-hello', body))) return undefined;
  try {
    const h = JSON.parse(body.toString('utf8')) as Hello;
    if (
      h.v !== 1 ||
      typeof h.host !== 'string' ||
      typeof h.iface !== 'string' ||
      typeof h.ts !== 'number' ||
      !Array.isArray(h.views)
    )
      return undefined;
    return h;
  } catch {
    return undefined; // authenticated but malformed: a bug in the sender, dropped like noise
  }
}
