import { TandemError } from '../errors/index.js';
import { LoopbackDevice } from './loopback-provider.js';
import type { Device, ProviderName } from './types.js';

export * from './types.js';
export { completionError, expectSuccess } from './completions.js';

/** Opens a device of the given provider. shm, tcp and rdma are loaded on demand. */
export async function openDevice(provider: ProviderName): Promise<Device> {
  switch (provider) {
    case 'loopback':
      return new LoopbackDevice();
    case 'tcp':
      return new (await import('./tcp-provider.js')).TcpDevice();
    case 'shm':
      return new (await import('./shm-provider.js')).ShmDevice();
    case 'rdma':
      return new (await import('./rdma-provider.js')).RdmaDevice();
    default:
      throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `unknown fabric provider '${String(provider)}'`, {
        hint: 'use loopback, shm, tcp or rdma (see `tandem devinfo`)',
      });
  }
}
export { probeProviders } from './providers.js';
export { fabricFootprint, type FabricFootprint } from './footprint.js';
