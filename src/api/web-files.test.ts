import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tempModel } from '../engine/testing/temp-model.js';
import type { ApiServer } from './http-server.js';
import { startTestServer } from './testing.js';
import { defaultWebRoot } from './web-files.js';

/*
 * The dashboard's files at / and /assets/: from the real build (what `npm run build` made), and
 * from a made-up root for what the build does not show (a missing build, a path that leaves it).
 */

const path = tempModel('tandem-web-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 });
const KEY = 'web-key';
const fake = mkdtempSync(join(tmpdir(), 'tandem-web-root-'));
const missing = join(fake, 'not-built');
const servers: ApiServer[] = [];

async function server(webRoot: string): Promise<ApiServer> {
  const s = await startTestServer(path(), { name: 'tiny', apiKey: KEY, webRoot });
  servers.push(s);
  return s;
}

let built: ApiServer;
let made: ApiServer;
let absent: ApiServer;
beforeEach(async () => {
  if (built) return;
  mkdirSync(join(fake, 'root', 'assets'), { recursive: true });
  writeFileSync(join(fake, 'root', 'index.html'), '<div id="app"></div>');
  writeFileSync(join(fake, 'root', 'assets', 'a.css'), 'body{}');
  writeFileSync(join(fake, 'secret.txt'), 'outside the root');
  built = await server(defaultWebRoot);
  made = await server(join(fake, 'root'));
  absent = await server(missing);
});
after(async () => {
  for (const s of servers) await s.close(0);
  rmSync(fake, { recursive: true, force: true });
});

/** GET with the path sent as written (fetch would resolve `..` before sending). */
function rawGet(url: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { path }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

test('web: / serves the built dashboard without a key, and every asset it names with its content type', async (t) => {
  if (!existsSync(join(defaultWebRoot, 'index.html'))) {
    t.skip(`no dashboard build at ${defaultWebRoot}: run \`npm run build\``);
    return;
  }
  const page = await fetch(`${built.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
  const html = await page.text();
  assert.match(html, /<div id="app"><\/div>/);
  assert.equal(html, readFileSync(join(defaultWebRoot, 'index.html'), 'utf8'));
  const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1] as string);
  assert.ok(
    assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')),
    assets.join(' '),
  );
  for (const asset of assets) {
    const res = await fetch(`${built.url}${asset}`);
    assert.equal(res.status, 200, asset);
    const type = asset.endsWith('.js') ? /^text\/javascript/ : /^text\/css/;
    assert.match(res.headers.get('content-type') ?? '', type, asset);
    assert.ok((await res.arrayBuffer()).byteLength > 0);
  }
  // the page is open; the data behind it is not
  assert.equal((await fetch(`${built.url}/v1/cluster`)).status, 401);
});

test('web: content types from a root; a missing file or a path out of the root is a 404', async () => {
  const css = await fetch(`${made.url}/assets/a.css`);
  assert.equal(css.status, 200);
  assert.equal(css.headers.get('content-type'), 'text/css; charset=utf-8');
  assert.equal(await css.text(), 'body{}');
  assert.equal((await fetch(`${made.url}/assets/none.js`)).status, 404);
  assert.equal(await rawGet(made.url, '/assets/../secret.txt'), 404);
  assert.equal(await rawGet(made.url, '/assets/%2e%2e/%2e%2e/secret.txt'), 404);
});

test('web: without a build, / is a 503 page that says to run npm run build; the API still answers', async () => {
  const res = await fetch(`${absent.url}/`);
  assert.equal(res.status, 503);
  assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
  assert.match(await res.text(), /npm run build/);
  await absent.ready;
  const models = await fetch(`${absent.url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
  assert.equal(models.status, 200);
  await models.text();
});
