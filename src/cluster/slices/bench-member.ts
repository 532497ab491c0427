// The member's side of `tandem bench slices`, in its own process: on each stdin line it
// receives the coordinator's whole model through the slice connection (`slices`, or
// `slices-cache` writing each slice to a fresh cache as a member does) or reads `bytes` from a
// plain TCP connection (`tcp HOST:PORT BYTES`, the link's raw rate), and prints one JSON line
// (bytes, ms, cpuMs: the CPU time of this process, every thread, user and system, and loopMs:
// its main thread's, the part of the work that cannot spread over cores).
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { matrixShape, rowBytes } from '../../engine/model/model-file.js';
import { parseHostPort } from '../protocol.js';
import { mainThreadCpuMs } from './bench-link.js';
import { CHUNK_BYTES, chunkRows } from './manifest.js';
import { REMOTE_READS_IN_FLIGHT, RemoteModelFile } from './remote-model-file.js';
import { SliceCache } from './slice-cache.js';
import { SliceClient } from './slice-client.js';

const [address = '', size = '0'] = process.argv.slice(2);
const secret = process.env.TANDEM_BENCH_SECRET ?? '';

/** Rows per read: 4 pieces' worth, so a large tensor is never held whole. */
const READ_BYTES = 4 * CHUNK_BYTES;
/**
 * Reads in flight at once, each into a buffer of its own, as many as a member's loader keeps
 * (RemoteModelFile.readsInFlight): the next requests wait at the coordinator while one is
 * answered, so no read costs a round trip on an idle link.
 */
const WINDOW = REMOTE_READS_IN_FLIGHT;

/** Every tensor's rows, in whole pieces of the manifest's grid, as a loader reading whole tensors asks for them. */
function reads(file: RemoteModelFile): { name: string; start: number; count: number; bytes: number }[] {
  const all: { name: string; start: number; count: number; bytes: number }[] = [];
  for (const [name, entry] of file.tensors) {
    const { rows, cols } = matrixShape(entry);
    const stride = rowBytes(entry.type, cols);
    const step = (READ_BYTES / CHUNK_BYTES) * chunkRows(stride);
    for (let r = 0; r < rows; r += step) {
      const count = Math.min(step, rows - r);
      all.push({ name, start: r, count, bytes: count * stride });
    }
  }
  return all;
}

async function slices(cached: boolean): Promise<number> {
  const client = await SliceClient.connect(address, secret, 1);
  const dir = cached ? mkdtempSync(join(tmpdir(), 'tandem-bench-slices-')) : undefined;
  try {
    const file = new RemoteModelFile(
      await client.header(),
      Number(size),
      'bench',
      client,
      await client.manifest(),
      dir ? new SliceCache(dir) : undefined,
    );
    const todo = reads(file);
    let bytes = 0;
    // WINDOW readers, each taking the next read as its last completes, into its own buffer
    const reader = async (): Promise<void> => {
      const buffer = new Uint8Array(READ_BYTES);
      for (let r = todo.shift(); r; r = todo.shift()) {
        const got = await file.readRows(
          r.name,
          r.start,
          r.count,
          r.bytes <= buffer.length ? buffer : undefined,
        );
        bytes += got.length;
      }
    };
    await Promise.all(Array.from({ length: WINDOW }, reader));
    return bytes;
  } finally {
    client.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

function tcp(to: string, bytes: number): Promise<number> {
  const { host, port } = parseHostPort(to, 'tcp sink');
  return new Promise((resolve, reject) => {
    let got = 0;
    const socket = connect({ host, port });
    socket.on('data', (d: Buffer) => {
      got += d.length;
      if (got >= bytes) {
        socket.destroy();
        resolve(got);
      }
    });
    socket.on('error', reject);
  });
}

for await (const line of createInterface({ input: process.stdin })) {
  const [what, to, bytes] = line.split(' ');
  const started = performance.now();
  const cpu = process.cpuUsage();
  const loop = mainThreadCpuMs();
  try {
    const got = what === 'tcp' ? await tcp(to ?? '', Number(bytes)) : await slices(what === 'slices-cache');
    const used = process.cpuUsage(cpu);
    const cpuMs = (used.user + used.system) / 1000;
    const loopMs = mainThreadCpuMs() - loop;
    process.stdout.write(
      JSON.stringify({ what, bytes: got, ms: performance.now() - started, cpuMs, loopMs }) + '\n',
    );
  } catch (e) {
    process.stdout.write(JSON.stringify({ what, error: (e as Error).message }) + '\n');
  }
}
