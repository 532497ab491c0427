import { TandemError } from '../errors/index.js';
import { normalizeLinks, type Link, type TopologyGraph } from './model.js';

/** One cable with its own /30: `a` takes the first usable address, `b` the second. */
export interface AddressedLink extends Link {
  subnet: string;
  aAddress: string;
  bAddress: string;
}

function parseCidr(cidr: string): { base: number; bits: number } {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(cidr.trim());
  const octets = m ? m.slice(1, 5).map(Number) : [];
  const bits = m ? Number(m[5]) : -1;
  if (!m || octets.some((o) => o > 255) || bits < 8 || bits > 30) {
    throw new TandemError('INVALID_ARGUMENT', `init: '${cidr}' is not an IPv4 network such as 10.99.0.0/16`, {
      hint: 'pass --subnet as a.b.c.d/n with n between 8 and 30',
    });
  }
  const ip = octets.reduce((acc, o) => acc * 256 + o, 0);
  const size = 2 ** (32 - bits);
  return { base: ip - (ip % size), bits };
}

const dotted = (n: number): string => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

/**
 * One /30 per cable (as MLX's distributed_config does), carved from `network` in the canonical
 * order of the cables, so every host computes the same plan from the same graph.
 */
export function assignAddresses(graph: TopologyGraph, network = '10.99.0.0/16'): AddressedLink[] {
  const { base, bits } = parseCidr(network);
  const links = normalizeLinks(graph.links);
  const capacity = 2 ** (32 - bits) / 4;
  if (links.length > capacity) {
    throw new TandemError(
      'TOPOLOGY_ADDRESS_EXHAUSTED',
      `init: ${links.length} cables need ${links.length} /30 subnets but ${network} holds ${capacity}`,
      {
        hint: 'pass a larger --subnet',
        details: { cables: links.length, capacity },
      },
    );
  }
  return links.map((l, k) => {
    const net = base + 4 * k;
    return { ...l, subnet: `${dotted(net)}/30`, aAddress: dotted(net + 1), bAddress: dotted(net + 2) };
  });
}

/** This host's end of each cable: interface, its address, and the peer's address. */
export function hostAddresses(
  plan: readonly AddressedLink[],
  host: string,
): { iface: string; address: string; peer: string; peerAddress: string }[] {
  return plan.flatMap((l) =>
    l.a === host
      ? [{ iface: l.aPort, address: l.aAddress, peer: l.b, peerAddress: l.bAddress }]
      : l.b === host
        ? [{ iface: l.bPort, address: l.bAddress, peer: l.a, peerAddress: l.aAddress }]
        : [],
  );
}

/** The commands that give this host its addresses; `apply` runs exactly these. */
export function addressCommands(
  plan: readonly AddressedLink[],
  host: string,
  os: string,
  mode: 'rdma' | 'tcp',
): string[][] {
  const mine = hostAddresses(plan, host);
  if (os === 'darwin') {
    const cmds: string[][] = mode === 'rdma' ? [['sudo', 'ifconfig', 'bridge0', 'down']] : [];
    for (const m of mine) {
      cmds.push(['sudo', 'ifconfig', m.iface, 'inet', m.address, 'netmask', '255.255.255.252']);
      cmds.push(['sudo', 'route', 'change', m.peerAddress, '-interface', m.iface]);
    }
    return cmds;
  }
  return mine.map((m) => ['ip', 'addr', 'replace', `${m.address}/30`, 'dev', m.iface]);
}
