import { openDevice } from '../fabric/index.js';
import type { Communicator } from './communicator.js';
import { createCommunicator, type CommunicatorOptions } from './create-communicator.js';

/**
 * Every rank of a world in this process over the loopback provider: what unit tests of the
 * layers above use. Rank 0 listens on a free virtual port and is the rendezvous.
 */
export async function createLocalWorld(
  size: number,
  options: Omit<
    CommunicatorOptions,
    'rank' | 'size' | 'provider' | 'device' | 'rendezvous' | 'listener'
  > = {},
): Promise<Communicator[]> {
  const device0 = await openDevice('loopback');
  const listener = await device0.listen({ port: 0, secret: options.secret ?? 'tandem' });
  const address = `${listener.host}:${listener.port}`;
  try {
    return await Promise.all(
      Array.from({ length: size }, async (_, rank) =>
        createCommunicator({
          ...options,
          rank,
          size,
          rendezvous: { kind: 'root', address },
          ...(rank === 0 ? { device: device0, listener } : { provider: 'loopback' as const }),
        }),
      ),
    );
  } finally {
    await listener.close();
  }
}
