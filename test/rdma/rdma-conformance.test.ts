import { test } from 'node:test';
import { conformance } from '../../src/fabric/conformance.cases.js';
import { RdmaDevice } from '../../src/fabric/rdma-provider.js';

/**
 * The fabric's conformance suite on the rdma provider, RC and UC, on a real verbs device: both
 * ends are devices opened on the rxe device the soft-RoCE guest makes (test/rdma/guest-job.sh
 * sets TANDEM_RDMA_DEVICE), which connects their queue pairs inside the kernel. The cases a
 * NIC answers differently are marked in conformance.cases.ts (ConformanceProfile.verbs).
 * Deadlines are scaled for software emulation. Skipped where there is no device.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const scale = Number(process.env['TANDEM_RDMA_TIMEOUT_SCALE'] ?? 6);

if (device === undefined) {
  test(
    'rdma conformance',
    { skip: 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' },
    () => {},
  );
} else {
  conformance('rdma', {
    label: 'rdma rc',
    open: () => Promise.resolve(new RdmaDevice({ name: device, qpType: 'rc' })),
    verbs: { reads: true, refusals: true },
    timeoutScale: scale,
  });
  conformance('rdma', {
    label: 'rdma uc',
    open: () => Promise.resolve(new RdmaDevice({ name: device, qpType: 'uc' })),
    verbs: { reads: false, refusals: false },
    timeoutScale: scale,
  });
}
