import assert from 'node:assert/strict';
import type { ClusterView } from '../cluster/index.js';
import { ApiServer, type ApiServerOptions } from './http-server.js';
import { loadServedModel, type LoadServedOptions } from './served-model.js';

/**
 * Tests: an in-process server on a free loopback port over the model at `path` (one compute
 * thread), with the given server options. Close it with `close(0)`.
 */
export function startTestServer(
  path: string,
  options: Partial<Omit<ApiServerOptions, 'load'>> & Pick<LoadServedOptions, 'context' | 'name'> = {},
): Promise<ApiServer> {
  const { context, name, ...rest } = options;
  return ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots: 4,
    maxQueue: 64,
    ...rest,
    load: () =>
      loadServedModel(path, {
        threads: 1,
        ...(context !== undefined ? { context } : {}),
        ...(name !== undefined ? { name } : {}),
      }),
  });
}

/** The server's GET /v1/cluster view (asserting it answered 200). */
export async function clusterView(url: string): Promise<ClusterView> {
  const res = await fetch(`${url}/v1/cluster`);
  assert.equal(res.status, 200);
  return (await res.json()) as ClusterView;
}

/** The value of a Prometheus sample (first match of `name` with exactly these labels). */
export async function metric(
  url: string,
  sample: string,
  headers: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? 0 : Number(line.slice(sample.length + 1));
}

/** Polls `check` every 20 ms until it holds; throws, naming `what`, after `timeoutMs`. */
export async function until(
  check: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
