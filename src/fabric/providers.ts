import { accessSync, constants, statfsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { libcProblem } from './shm-ffi.js';
import type { ProviderInfo } from './types.js';

/** The providers on this machine and their state, like `ibv_devinfo` (what `tandem devinfo` prints). */
export function probeProviders(): ProviderInfo[] {
  return [
    { provider: 'loopback', available: true, detail: 'in-process queues; for tests of every layer above' },
    probeShm(),
    {
      provider: 'tcp',
      available: true,
      detail: 'software RDMA over TCP; responder validates key, domain, access, bounds',
    },
    probeRdma(),
  ];
}

function probeShm(): ProviderInfo {
  const problem = libcProblem();
  if (problem) return { provider: 'shm', available: false, detail: problem };
  try {
    accessSync('/dev/shm', constants.W_OK);
    const fs = statfsSync('/dev/shm');
    const freeMiB = Math.floor((fs.bavail * fs.bsize) / 2 ** 20);
    return {
      provider: 'shm',
      available: true,
      detail: `POSIX shared memory rings in /dev/shm (${freeMiB} MiB free); one host`,
    };
  } catch (e) {
    return { provider: 'shm', available: false, detail: `/dev/shm is not writable: ${(e as Error).message}` };
  }
}

/** Loads libibverbs and lists devices; explains why RDMA is unusable when it is. */
export function probeRdma(): ProviderInfo {
  const lib = process.platform === 'darwin' ? 'librdma.dylib' : 'libibverbs.so.1';
  let koffi: typeof import('koffi');
  try {
    koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
  } catch (e) {
    return { provider: 'rdma', available: false, detail: `koffi is missing: ${(e as Error).message}` };
  }
  let verbs: ReturnType<typeof koffi.load>;
  try {
    verbs = koffi.load(lib);
  } catch {
    const how =
      process.platform === 'darwin'
        ? 'needs macOS 26.2+ with `rdma_ctl enable` run from Recovery'
        : 'install libibverbs1 (rdma-core)';
    return { provider: 'rdma', available: false, detail: `${lib} not found: ${how}` };
  }
  try {
    const getList = verbs.func('void *ibv_get_device_list(_Out_ int *num)');
    const freeList = verbs.func('void ibv_free_device_list(void *list)');
    const getName = verbs.func('const char *ibv_get_device_name(void *device)');
    const num = [0];
    const list = getList(num) as unknown;
    if (list === null || list === 0n) {
      const errno = readErrno(koffi);
      return {
        provider: 'rdma',
        available: false,
        detail: `ibv_get_device_list returned NULL${errno ? ` (${errno})` : ''}: no RDMA devices or kernel support`,
      };
    }
    const count = num[0] ?? 0;
    const names: string[] = [];
    const ptrs = koffi.decode(list, 'void *', count) as unknown[];
    for (const p of ptrs) names.push(String(getName(p)));
    freeList(list);
    if (count === 0)
      return { provider: 'rdma', available: false, detail: 'ibv_get_device_list found no RDMA devices' };
    return {
      provider: 'rdma',
      available: true,
      detail: `verbs devices ${names.join(', ')} (${lib}); RC or UC queue pairs`,
    };
  } catch (e) {
    return { provider: 'rdma', available: false, detail: `${lib} is unusable: ${(e as Error).message}` };
  } finally {
    verbs.unload();
  }
}

function readErrno(koffi: typeof import('koffi')): string {
  try {
    const libc = koffi.load('libc.so.6');
    const loc = libc.func('int *__errno_location(void)');
    const value = koffi.decode(loc(), 'int') as number;
    const names: Record<number, string> = { 2: 'ENOENT', 12: 'ENOMEM', 13: 'EACCES', 38: 'ENOSYS' };
    return value ? `errno ${names[value] ?? value}` : '';
  } catch {
    return '';
  }
}
