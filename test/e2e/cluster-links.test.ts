import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import type { ClusterView, LinkView } from '../../src/cluster/cluster-view.js';
import type { ProviderName } from '../../src/fabric/index.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * The links a cluster shows: a model served over 2 local members (tensor parallel, over shm
 * and over tcp). After requests, /v1/cluster has the control link to each member and each
 * member's link to the other (measured latency and bandwidth, bytes both ways, the fabric's
 * kind), every member's compute and communication share, and /metrics exports the same
 * figures: once the traffic has stopped and a heartbeat has passed, the link counters equal
 * the view's bytes exactly.
 */

let dir = '';
let path = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-links-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function view(url: string): Promise<ClusterView> {
  return (await (await fetch(`${url}/v1/cluster`)).json()) as ClusterView;
}

/** Polls `check` every 200 ms until it returns a value, at most `ms`. */
async function waitFor<T>(what: string, ms: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const between = (v: ClusterView): LinkView[] => v.links.filter((l) => l.kind !== 'control');

for (const provider of ['shm', 'tcp'] as ProviderName[]) {
  describe(`cluster links over ${provider}`, { timeout: 120_000 }, () => {
    let server: ApiServer | undefined;
    before(async () => {
      server = await ApiServer.start({
        host: '127.0.0.1',
        port: 0,
        maxBodyBytes: 1 << 20,
        slots: 1,
        maxQueue: 4,
        load: () => loadClusterServedModel(path, { nodes: 2, parallel: 'tp', provider, threads: 1 }),
      });
      await server.ready;
    });
    after(() => server?.close(0));

    it('shows the control and member links with their figures, the shares, and the same in /metrics', async () => {
      const url = (server as ApiServer).url;
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: PROMPT, max_tokens: 6, temperature: 0 }),
      });
      assert.equal(res.status, 200);
      await res.json();
      // two heartbeats after the request: the later pair of samples holds no traffic, so the bytes stay
      const first = await waitFor('both members report their links and shares', 10_000, async () => {
        const v = await view(url);
        const ok =
          between(v).length === 2 &&
          between(v).every((l) => l.bytes_sent > 0) &&
          v.members.every((m) => m.compute_share !== null);
        return ok ? v : undefined;
      });
      const [a, b] = first.members.map((m) => m.id) as [string, string];
      assert.deepEqual(
        first.links
          .filter((l) => l.kind === 'control')
          .map((l) => [l.from, l.to, l.state])
          .sort(),
        [
          ['coordinator', a, 'up'],
          ['coordinator', b, 'up'],
        ],
      );
      for (const l of first.links.filter((x) => x.kind === 'control')) {
        assert.ok(l.bytes_sent > 0 && l.bytes_received > 0, JSON.stringify(l));
        assert.ok(l.latency_us !== null && l.latency_us > 0, 'the control link has a latency');
      }
      const links = between(first);
      assert.deepEqual(links.map((l) => [l.from, l.to, l.kind, l.state]).sort(), [
        [a, b, provider, 'up'],
        [b, a, provider, 'up'],
      ]);
      for (const l of links) {
        assert.ok(l.latency_us !== null && l.latency_us > 0, `latency measured: ${JSON.stringify(l)}`);
        assert.ok(
          l.bandwidth_MBps !== null && l.bandwidth_MBps > 0,
          `bandwidth measured: ${JSON.stringify(l)}`,
        );
        assert.ok(l.bytes_received > 0 && l.bytes_per_s >= 0);
      }
      for (const m of first.members) {
        const total = (m.compute_share ?? NaN) + (m.comm_share ?? NaN);
        assert.ok(Math.abs(total - 1) < 1e-9, `shares of ${m.id} add to 1`);
        assert.ok((m.comm_share ?? 0) > 0, 'a tensor-parallel member waits on its peer');
      }

      // nothing moves between the members now: a scrape and the view agree to the byte
      const settled = await waitFor('the traffic settles', 10_000, async () => {
        const v1 = await view(url);
        await new Promise((r) => setTimeout(r, 1200));
        const v2 = await view(url);
        const same = between(v1).every((l) =>
          between(v2).some((m) => m.from === l.from && m.to === l.to && m.bytes_sent === l.bytes_sent),
        );
        return same ? v2 : undefined;
      });
      const metrics = await (await fetch(`${url}/metrics`)).text();
      for (const l of between(settled)) {
        const labels = `member="${l.from}",peer="${l.to}",kind="${provider}"`;
        const sent = new RegExp(`^tandem:link_sent_bytes_total\\{${labels}\\} (\\S+)$`, 'm').exec(metrics);
        const got = new RegExp(`^tandem:link_received_bytes_total\\{${labels}\\} (\\S+)$`, 'm').exec(metrics);
        assert.equal(Number(sent?.[1]), l.bytes_sent, `${l.from}->${l.to} sent`);
        assert.equal(Number(got?.[1]), l.bytes_received, `${l.from}->${l.to} received`);
        assert.match(metrics, new RegExp(`^tandem:link_latency_seconds\\{${labels}\\} \\S+$`, 'm'));
        assert.match(
          metrics,
          new RegExp(`^tandem:link_bandwidth_bytes_per_second\\{${labels}\\} \\S+$`, 'm'),
        );
      }
      assert.match(metrics, new RegExp(`^tandem:member_comm_share\\{member="${a}"\\} \\S+$`, 'm'));
      assert.match(metrics, new RegExp(`^tandem:member_compute_share\\{member="${b}"\\} \\S+$`, 'm'));
    });
  });
}
