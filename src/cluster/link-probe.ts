import { performance } from 'node:perf_hooks';
import type { Communicator } from '../collectives/communicator.js';

/** What one rank measured of its link to `peer` (a world rank) when the model was placed. */
export interface LinkProbe {
  peer: number;
  /** One-way latency, µs: half the best round trip of a 4-byte message. */
  latencyUs: number;
  /** Megabytes (1e6 bytes) per second: the best of a few transfers, each timed until its small acknowledgement came back. */
  bandwidthMBps: number;
}

export interface LinkProbeOptions {
  /** Round trips for the latency (the best counts). */
  rounds?: number;
  /** Bytes of each bandwidth transfer (a multiple of 4). */
  bytes?: number;
  /** Transfers for the bandwidth (the best counts). */
  transfers?: number;
}

/** Keeps the probe's messages apart from any other point-to-point traffic of the world. */
const TAG = 0x11c;
/** Untimed round trips before the timed ones. */
const WARM_UP = 2;

/**
 * Measures this rank's link to every other rank of `world`, over the world's own fabric (what
 * the model's collectives use), in a short burst: a few ping-pongs for the latency, a few
 * 1 MiB transfers each acknowledged by a small message for the bandwidth (the acknowledgement's
 * way back is in the time: a slight underestimate, never a division by a near-zero time).
 * Figures taken while other processes share the cores are noisy; they are the link as the
 * placement met it. Collective: every
 * rank calls it at once. Pairs go in one global order (0-1, 0-2, ..., 1-2, ...), and each rank
 * takes its pairs in that order, so no two ranks wait on each other in a cycle; within a pair
 * each side leads once and keeps its own figures.
 */
export async function probeLinks(world: Communicator, o: LinkProbeOptions = {}): Promise<LinkProbe[]> {
  const rounds = o.rounds ?? 16;
  const transfers = o.transfers ?? 3;
  const small = new Int32Array(1);
  const big = new Int32Array((o.bytes ?? 1 << 20) >> 2);
  const out: LinkProbe[] = [];
  for (let a = 0; a < world.size; a++)
    for (let b = a + 1; b < world.size; b++) {
      if (world.rank !== a && world.rank !== b) continue;
      const peer = world.rank === a ? b : a;
      for (const leader of [a, b]) {
        if (leader !== world.rank) {
          await follow(world, peer, small, big, rounds, transfers);
          continue;
        }
        // the first round trips wait for the peer to arrive and warm the path: not timed
        await roundTrip(world, peer, small, WARM_UP);
        const rttMs = await roundTrip(world, peer, small, rounds);
        let best = Infinity;
        for (let i = 0; i < transfers; i++) {
          const t0 = performance.now();
          await world.send(peer, big, { tag: TAG });
          await world.recv(peer, small, { tag: TAG });
          best = Math.min(best, performance.now() - t0);
        }
        out.push({
          peer,
          latencyUs: (rttMs / 2) * 1000,
          bandwidthMBps: big.byteLength / (best / 1000) / 1e6,
        });
      }
    }
  return out;
}

/** The best round trip of `rounds` small messages to `peer`, ms. */
async function roundTrip(
  world: Communicator,
  peer: number,
  small: Int32Array,
  rounds: number,
): Promise<number> {
  let best = Infinity;
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    await world.send(peer, small, { tag: TAG });
    await world.recv(peer, small, { tag: TAG });
    best = Math.min(best, performance.now() - t0);
  }
  return best;
}

/** The other side of a leader's probe: echo each ping, acknowledge each transfer. */
async function follow(
  world: Communicator,
  peer: number,
  small: Int32Array,
  big: Int32Array,
  rounds: number,
  transfers: number,
): Promise<void> {
  for (let i = 0; i < WARM_UP + rounds; i++) {
    await world.recv(peer, small, { tag: TAG });
    await world.send(peer, small, { tag: TAG });
  }
  for (let i = 0; i < transfers; i++) {
    await world.recv(peer, big, { tag: TAG });
    await world.send(peer, small, { tag: TAG });
  }
}
