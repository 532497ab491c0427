// One rank of a multi-process collectives test. argv: JSON WorkerConfig. Prints
// `LISTENING host:port` (rank 0 of a world of 2 or more), then one `RESULT {json}` line per
// case, then `DONE {"closeMs": n}`.
// Expected values come from the closed-form inputs (collectives.cases.ts: inputValue, and
// expectedReduce summing them in float64) and from the chunk rule written out below, never
// from src/collectives' own routines; only the dtype conversions (kernels/dtype.ts) are shared.
import { createHash } from 'node:crypto';
import type { Communicator } from '../../src/collectives/communicator.js';
import { createCommunicator } from '../../src/collectives/create-communicator.js';
import {
  expectedReduce,
  inputFor,
  inputValue,
  type ReduceName,
} from '../../src/collectives/collectives.cases.js';
import type { Algorithm } from '../../src/collectives/call.js';
import type { TopologyKind } from '../../src/collectives/graph.js';
import { allocate, toNumbers, type DType, type DTypeArray } from '../../src/kernels/dtype.js';
import type { ProviderName } from '../../src/fabric/index.js';

export interface WorkerCase {
  op: 'all-reduce' | 'all-gather' | 'reduce-scatter' | 'broadcast' | 'all-to-all' | 'barrier' | 'split';
  dtype?: DType;
  count?: number;
  reduce?: ReduceName;
  algorithm?: Algorithm;
  root?: number;
}

export interface WorkerConfig {
  rank: number;
  size: number;
  provider: ProviderName;
  graph: TopologyKind;
  address: string;
  cases: WorkerCase[];
  wires?: number;
  /** `loop`: after the cases, all-reduce until the communicator fails, then report the error. */
  mode?: 'cases' | 'loop';
}

const config = JSON.parse(process.argv[2] as string) as WorkerConfig;

function digest(a: DTypeArray): string {
  return createHash('sha256')
    .update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength))
    .digest('hex')
    .slice(0, 16);
}

/**
 * Rank `rank`'s share of a reduce-scatter of `count` values over `n` ranks, as documented (not
 * through chunkRanges, the code under test): contiguous, in rank order, sizes differing by at
 * most one, the first `count % n` ranks taking the extra value.
 */
function myChunk(count: number, n: number, rank: number): { offset: number; count: number } {
  const base = Math.floor(count / n);
  const extra = count % n;
  return { offset: rank * base + Math.min(rank, extra), count: base + (rank < extra ? 1 : 0) };
}

function checkLength(got: { length: number }, want: number, what: string): void {
  if (got.length !== want) throw new Error(`${what}: got ${got.length} values, expected ${want}`);
}

function check(got: number[] | Float64Array, want: (i: number) => number, what: string): void {
  for (let i = 0; i < got.length; i++)
    if (got[i] !== want(i)) throw new Error(`${what}: element ${i} is ${got[i]}, expected ${want(i)}`);
}

async function run(c: Communicator, k: WorkerCase): Promise<string> {
  const dtype = k.dtype ?? 'f32';
  const count = k.count ?? 0;
  const alg = k.algorithm ? { algorithm: k.algorithm } : {};
  const n = config.size; // the world as launched, not as the communicator reports it
  switch (k.op) {
    case 'all-reduce': {
      const d = inputFor(dtype, c.rank, count);
      await c.allReduce(d, { dtype, op: k.reduce ?? 'sum', ...alg });
      check(toNumbers(dtype, d), (i) => expectedReduce(k.reduce ?? 'sum', dtype, n, i), 'all-reduce');
      return digest(d);
    }
    case 'all-gather': {
      const out = await c.allGather(inputFor(dtype, c.rank, count), { dtype, ...alg });
      checkLength(out, n * count, 'all-gather');
      check(toNumbers(dtype, out), (i) => inputValue(Math.floor(i / count), i % count), 'all-gather');
      return digest(out);
    }
    case 'reduce-scatter': {
      const r = myChunk(count, n, c.rank);
      const out = await c.reduceScatter(inputFor(dtype, c.rank, count), {
        dtype,
        op: k.reduce ?? 'sum',
        ...alg,
      });
      checkLength(out, r.count, 'reduce-scatter');
      check(
        toNumbers(dtype, out),
        (i) => expectedReduce(k.reduce ?? 'sum', dtype, n, r.offset + i),
        'reduce-scatter',
      );
      return `len ${out.length}`;
    }
    case 'broadcast': {
      const root = k.root ?? 0;
      const d = c.rank === root ? inputFor(dtype, root, count) : allocate(dtype, count);
      await c.broadcast(d, root, { dtype, ...alg });
      check(toNumbers(dtype, d), (i) => inputValue(root, i), 'broadcast');
      return digest(d);
    }
    case 'all-to-all': {
      const counts = Array.from({ length: n }, (_, j) => ((c.rank + j) % 3) * count);
      const send = new Int32Array(counts.reduce((a, b) => a + b, 0));
      let at = 0;
      for (let j = 0; j < n; j++)
        for (let i = 0; i < (counts[j] as number); i++) send[at++] = c.rank * 1_000_000 + j * 10_000 + i;
      const out = await c.allToAll(send, counts);
      const want: number[] = [];
      for (let j = 0; j < n; j++)
        for (let i = 0; i < ((j + c.rank) % 3) * count; i++) want.push(j * 1_000_000 + c.rank * 10_000 + i);
      checkLength(out, want.length, 'all-to-all');
      check([...out], (i) => want[i] as number, 'all-to-all');
      return `len ${out.length}`;
    }
    case 'barrier':
      await c.barrier();
      return 'ok';
    case 'split': {
      const sub = await c.split(c.rank % 2);
      if (!sub) throw new Error('split returned nothing');
      const d = Float32Array.of(c.rank);
      await sub.allReduce(d);
      let want = 0;
      for (let r = c.rank % 2; r < n; r += 2) want += r;
      if (d[0] !== want) throw new Error(`split all-reduce gave ${d[0]}, expected ${want}`);
      await sub.close();
      return 'ok';
    }
  }
}

const print = (line: string): void => void process.stdout.write(line + '\n');
const comm = await createCommunicator({
  rank: config.rank,
  size: config.size,
  provider: config.provider,
  graph: config.graph,
  rendezvous: { kind: 'root', address: config.address },
  secret: 'e2e-collectives',
  ...(config.wires ? { wires: config.wires } : {}),
  // Every wait's deadline, and the bound on close()'s barrier and linger: ample for any one
  // message here, and twice the bound collectives.test.ts puts on close()
  timeoutMs: 10_000,
  onListening: (a) => print(`LISTENING ${a}`),
});
if (comm.rank !== config.rank || comm.size !== config.size)
  throw new Error(
    `the communicator says rank ${comm.rank} of ${comm.size}, launched as ${config.rank} of ${config.size}`,
  );
for (const [i, k] of config.cases.entries()) {
  try {
    print(`RESULT ${JSON.stringify({ i, ok: true, out: await run(comm, k) })}`);
  } catch (e) {
    print(
      `RESULT ${JSON.stringify({ i, ok: false, error: (e as Error).message, code: (e as { code?: string }).code })}`,
    );
  }
}
if (config.mode === 'loop') {
  print('READY');
  const d = new Float32Array(50_000);
  try {
    for (;;) await comm.allReduce(d, { algorithm: 'ring' });
  } catch (e) {
    const err = e as { code?: string; details?: { rank?: number }; message: string };
    print(
      `FAILED ${JSON.stringify({ code: err.code, rank: err.details?.rank, message: err.message, at: Date.now() })}`,
    );
    const t = Date.now();
    try {
      await comm.barrier();
    } catch (e2) {
      print(`LATER ${JSON.stringify({ code: (e2 as { code?: string }).code, ms: Date.now() - t })}`);
    }
  }
}
// close() is timed: the test bounds it (a goodbye must not cut off relays; its linger is bounded by timeoutMs)
const closing = performance.now();
await comm.close();
print(`DONE ${JSON.stringify({ closeMs: Math.round(performance.now() - closing) })}`);
