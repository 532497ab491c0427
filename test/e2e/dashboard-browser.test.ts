import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { defaultWebRoot } from '../../src/api/web-files.js';
import type { ClusterView } from '../../src/cluster/index.js';
import { makeTestModelFile } from './parallel-models.js';

/*
 * The dashboard in a real browser (Debian's chromium driven by playwright-core; no browser is
 * ever downloaded) against a model served over 2 local members: the login form, both members,
 * a chat answer streamed into the panel, and a member killed: dead on the page and a
 * re-placement in the events. A screenshot of each state is taken; with
 * TANDEM_UPDATE_SCREENSHOTS=1 they are copied to docs/dashboard/ (the README shows them).
 */

const CANDIDATES = [process.env.TANDEM_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
const executable = CANDIDATES.find((p): p is string => p !== undefined && p !== '' && existsSync(p));
const built = existsSync(join(defaultWebRoot, 'index.html'));
const skip = !executable
  ? 'no chromium found (/usr/bin/chromium, or TANDEM_CHROMIUM): install it with `apt-get install chromium` (bin/setup.sh does as root)'
  : !built
    ? 'the dashboard is not built: run `npm run build`'
    : false;

const KEY = 'browser-key';
const docs = resolve(import.meta.dirname, '..', '..', 'docs', 'dashboard');
let dir = '';
let server: ApiServer | undefined;
let browser: Browser | undefined;

before(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), 'tandem-dashboard-browser-'));
  const path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
  server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    apiKey: KEY,
    maxBodyBytes: 1 << 20,
    slots: 2,
    maxQueue: 8,
    load: () => loadClusterServedModel(path, { nodes: 2, parallel: 'tp', threads: 1 }),
  });
  await server.ready;
  browser = await chromium.launch({ executablePath: executable as string, args: ['--no-sandbox'] });
});
after(async () => {
  await browser?.close();
  await server?.close(0);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A screenshot of the page as it is, kept in the temporary directory (and in docs/ when asked). */
async function shot(page: Page, name: string): Promise<void> {
  const file = join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  assert.deepEqual([...readFileSync(file).subarray(1, 4)], [0x50, 0x4e, 0x47], `${name}.png is a PNG`);
  if (process.env.TANDEM_UPDATE_SCREENSHOTS === '1') {
    mkdirSync(docs, { recursive: true });
    copyFileSync(file, join(docs, `${name}.png`));
  }
}

async function clusterView(): Promise<ClusterView> {
  const res = await fetch(`${server?.url}/v1/cluster`, { headers: { authorization: `Bearer ${KEY}` } });
  return (await res.json()) as ClusterView;
}

test(
  'dashboard in chromium: login, 2 members, a streamed chat answer, a killed member dead and re-placed',
  { skip, timeout: 180_000 },
  async () => {
    const page = await (browser as Browser).newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(15_000);
    await page.goto(`${server?.url}/`);
    await page.fill('input[name=key]', KEY);
    await page.click('form.login button[type=submit]');

    const rows = page.locator('table.members tr[data-member]');
    // page functions as strings: this file is type-checked without the DOM's types
    await page.waitForFunction("document.querySelectorAll('table.members tr[data-member]').length === 2");
    assert.equal(await rows.count(), 2);
    assert.equal(await page.locator('svg.graph g.member.alive').count(), 2);
    assert.equal(await page.locator('table.placement tr').count(), 2);
    // the members' link carries its kind, measured latency and bandwidth, and live bytes/s
    // (once both members' first heartbeat after the placement has come)
    const fabric = page.locator('svg.graph g.link.fabric');
    await fabric
      .locator('text', { hasText: / · [\d.]+ (µs|ms) · [\d.]+ [MG]B\/s · [\d.]+ k?B\/s$/ })
      .waitFor();
    assert.equal(await fabric.count(), 1, 'one edge between the 2 members');
    const view = await clusterView();
    const link = view.links.find((l) => l.kind !== 'control');
    assert.ok(link, "the view has the members' link");
    assert.equal(await fabric.getAttribute('data-kind'), link.kind);
    assert.match((await fabric.locator('text').textContent()) ?? '', new RegExp(`^${link.kind} · `));
    assert.equal(await page.locator('svg.graph g.link.control text').count(), 2, 'control links labelled');
    await shot(page, 'members');

    await page.fill('input[name=message]', 'Hello');
    await page.click('.chat form button[type=submit]');
    // tokens/s shows once the answer's usage came, at its end
    await page.locator('.answer-stats', { hasText: /[\d.]+ tok\/s/ }).waitFor({ timeout: 60_000 });
    await page.locator('.chat form button[type=submit]:not([disabled])').waitFor();
    // a snapshot taken after the answer ended (its TTFT is in it) before the picture
    await page.locator('header .figures', { hasText: /0\/2 running/ }).waitFor();
    const answer = (await page.locator('.message.assistant').last().textContent()) ?? '';
    assert.ok(answer.length > 0, 'the answer streamed into the panel');
    assert.match((await page.locator('.answer-stats').textContent()) ?? '', /TTFT \d+ ms · [\d.]+ tok\/s/);
    await shot(page, 'chat');

    const victim = (await clusterView()).members[1];
    assert.ok(victim?.pid, 'the member has a pid in /v1/cluster');
    const killedAt = Date.now();
    process.kill(victim.pid, 'SIGKILL');
    // the heartbeat marks it dead within 3 s; the page hears of it at the next snapshot (1 s)
    await page
      .locator(`table.members tr.dead[data-member="${victim.id}"]`)
      .waitFor({ state: 'attached', timeout: 4_500 });
    const seenMs = Date.now() - killedAt;
    assert.ok(seenMs < 4_500, `dead on the page after ${seenMs} ms`);
    await page.locator('.events .event.replaced').first().waitFor({ state: 'attached', timeout: 60_000 });
    assert.equal(await page.locator('svg.graph g.member.dead').count(), 1);
    await shot(page, 'member-lost');
    await page.close();
  },
);
