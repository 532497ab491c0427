import type { LinkKind } from '../model.js';

/** One network interface as a probe sees it. */
export interface NetInterface {
  name: string;
  up: boolean;
  /** Carrier present / `status: active`; undefined when the platform does not say. */
  carrier?: boolean;
  mtu?: number;
  kind: LinkKind | 'bridge';
  speedGbps?: number;
  mac?: string;
  ipv4: string[];
  ipv6LinkLocal: string[];
  /** For a bridge: the interfaces it forwards between. */
  members?: string[];
}

/** One receptacle of a Mac's Thunderbolt controller, from `system_profiler SPThunderboltDataType -json`. */
export interface ThunderboltPort {
  /** Receptacle number printed by macOS (`receptacle_id_key`); `Thunderbolt <n>` in networksetup. */
  receptacle: string;
  domainUuid: string;
  /** Network interface behind this receptacle (`en2`), from `networksetup -listallhardwareports`. */
  iface?: string;
  /** `Up to 80 Gb/s` means Thunderbolt 5, `Up to 40 Gb/s` Thunderbolt 4. */
  speedGbps?: number;
  /** The host at the other end of the cable, when one is connected. */
  peer?: { domainUuid: string; name: string };
}

export interface RdmaPort {
  port: number;
  /** `PORT_ACTIVE`, `PORT_DOWN`, `ACTIVE`, ... as the tool prints it. */
  state: string;
  active: boolean;
  activeMtu?: number;
  linkLayer?: string;
}

export interface RdmaDevice {
  name: string;
  transport?: string;
  /** The network interface the device runs over (`rdma_en3` -> `en3` on macOS). */
  netdev?: string;
  ports: RdmaPort[];
}

/** Everything doctor needs to know about one host; JSON-serialisable so hosts can exchange it. */
export interface HostReport {
  host: string;
  platform: string;
  tandemVersion: string;
  /** Wall clock when the report was taken, for clock-skew checks. */
  timeMs: number;
  interfaces: NetInterface[];
  rdma: {
    /** macOS `rdma_ctl status`; undefined where there is no such switch (Linux) or it could not be read. */
    enabled?: boolean;
    devices: RdmaDevice[];
  };
  thunderbolt: ThunderboltPort[];
  /** Commands or files that could not be read, with the reason; shown as evidence, never fatal. */
  notes: string[];
}
