import { defineCommand } from '../options.js';
import { checkInteger } from '../checks.js';
import { benchSlices, type BenchSlicesRow } from '../../cluster/slices/bench-slices.js';

const fmt = (n: number | undefined): string => (n === undefined ? '-' : n.toFixed(0));

/** One row of the table, its columns padded to the header's. */
export function slicesRow(r: BenchSlicesRow): string {
  return [
    String(r.round),
    fmt(r.tcp_MBps),
    fmt(r.iperf3_MBps),
    fmt(r.slices_MBps),
    fmt(r.slices_cache_MBps),
    r.ratio.toFixed(2),
    fmt(r.slices_member_cpu_ms_per_GB),
    fmt(r.slices_coordinator_cpu_ms_per_GB),
    fmt(r.slices_member_loop_ms_per_GB),
    fmt(r.slices_coordinator_loop_ms_per_GB),
  ]
    .map((c, i) => c.padStart(HEAD[i]!.length))
    .join('  ');
}

const HEAD = [
  'round',
  'tcp MB/s',
  'iperf3 MB/s',
  'slices MB/s',
  'slices+cache MB/s',
  'slices/link',
  'member CPU ms/GB',
  'coordinator CPU ms/GB',
  'member main ms/GB',
  'coordinator main ms/GB',
];

export const command = defineCommand({
  name: 'bench slices',
  summary: 'the rate a member receives a model as slices from the coordinator, beside the raw tcp link rate',
  description:
    'Sends the whole model as slices (each 4 MiB piece hashed with SHA-256 and checked, as a member without the file receives it) from this process to a member process over 127.0.0.1, or with --link over a link of that rate, ' +
    "alternated with a plain Node TCP stream of the same bytes and iperf3 (when installed) over the same link; prints each round's MB/s and the best of each. " +
    "'slices+cache' also writes every slice to a fresh cache, as a member does. 'slices/link' is slices over iperf3's rate (else the tcp stream's). " +
    "'member CPU ms/GB' and 'coordinator CPU ms/GB' are the CPU time (user and system, every thread) each process spent per GB of the slices transfer; the best row takes the least of each. " +
    "'member main ms/GB' and 'coordinator main ms/GB' are the CPU time of each process's main thread per GB: the serial part of the work (hashing on the thread pool is not in it; Linux only).",
  positionals: [{ name: 'model', description: 'GGUF model file or model folder', required: true }],
  options: {
    rounds: { type: 'number', description: 'alternated rounds; the best of each counts', default: 3 },
    link: {
      type: 'string',
      description:
        'a tc rate (10gbit, 2.5gbit, 1gbit): the member runs in a network namespace behind a veth pair shaped to it, as behind a real cable (Linux, root)',
    },
    provider: {
      type: 'string',
      description: 'the link measured (slices travel over the cluster connection, tcp)',
      choices: ['tcp'],
      default: 'tcp',
    },
    json: { type: 'boolean', description: 'one JSON object per row instead of a table' },
  },
  examples: [
    'tandem bench slices /tmp/tl.gguf',
    'tandem bench slices /tmp/tl.gguf --rounds 5 --json',
    'tandem bench slices /tmp/tl.gguf --link 10gbit',
  ],
  async run({ options, positionals }) {
    checkInteger('bench slices', 'rounds', options.rounds, 1, 100, 3);
    if (!options.json) process.stdout.write(HEAD.join('  ') + '\n');
    await benchSlices({
      model: positionals[0] as string,
      rounds: options.rounds,
      link: options.link,
      onRow: (r) => process.stdout.write((options.json ? JSON.stringify(r) : slicesRow(r)) + '\n'),
    });
    return 0;
  },
});
