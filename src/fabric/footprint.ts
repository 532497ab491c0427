import type { ProviderName } from './types.js';

/**
 * What the providers allocate besides the caller's memory regions, so that a placement can
 * count it against a node's memory limit before anything connects. The providers size their
 * buffers from these constants.
 */

/** shm: each connection's receive ring (written by the peer), after its header page. */
export const SHM_RING_BYTES = 16 << 20;
export const SHM_RING_HEADER_BYTES = 4096;
/** shm: one doorbell page and one key table per device. */
export const SHM_BELL_BYTES = 4096;
export const SHM_KEY_SLOTS = 1024;
export const SHM_KEY_SLOT_BYTES = 128;
/** tcp: each connection's receive scratch and its staging buffer for small frames. */
export const TCP_SCRATCH_BYTES = 256 * 1024;
export const TCP_STAGING_BYTES = 64 * 1024;

export interface FabricFootprint {
  /** Bytes one open device holds. */
  device: number;
  /** Bytes each connection (queue pair) adds on this side. Kernel socket buffers are not counted. */
  perConnection: number;
}

/**
 * Process memory a provider's device and connections take. For shm the peer's ring, which
 * this side also maps, is counted by the peer (it is one set of shared pages), so nodes on
 * one host add up to what the host holds.
 */
export function fabricFootprint(provider: ProviderName): FabricFootprint {
  switch (provider) {
    case 'shm':
      return {
        device: SHM_BELL_BYTES + SHM_KEY_SLOTS * SHM_KEY_SLOT_BYTES,
        perConnection: SHM_RING_BYTES + SHM_RING_HEADER_BYTES,
      };
    case 'tcp':
      return { device: 0, perConnection: TCP_SCRATCH_BYTES + TCP_STAGING_BYTES };
    default:
      return { device: 0, perConnection: 0 };
  }
}
