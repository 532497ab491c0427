import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { extname, join, normalize, resolve, sep } from 'node:path';

/** Where `npm run build` puts the dashboard (web/ built by Vite), from this file's place in the package. */
export const defaultWebRoot = resolve(import.meta.dirname, '..', '..', 'build', 'web');

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.map': 'application/json',
  '.woff2': 'font/woff2',
};

/** Whether a GET for `path` is the dashboard's: the page at / and its built assets. */
export function isWebPath(path: string): boolean {
  return path === '/' || path === '/index.html' || path.startsWith('/assets/');
}

const NOT_BUILT = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tandem: dashboard not built</title></head>
<body><h1>The dashboard is not built</h1>
<p>This server has no build/web. Run <code>npm run build</code> in the tandem checkout (or
<code>bash bin/setup.sh</code>), then reload. The API answers meanwhile.</p></body></html>
`;

/**
 * Answers a dashboard path from `root`: the file with its content type, 404 for a path that
 * is not there or leaves `root`, and a 503 page saying to run `npm run build` when the page
 * itself is missing. Assets have content hashes in their names, so they may be cached for
 * good; the page is revalidated each time.
 */
export async function sendWebFile(res: ServerResponse, root: string, path: string): Promise<void> {
  const index = join(root, 'index.html');
  if (!existsSync(index)) {
    res.writeHead(503, { 'content-type': 'text/html; charset=utf-8', 'retry-after': '10' });
    res.end(NOT_BUILT);
    return;
  }
  const file = path === '/' ? index : normalize(join(root, decodeURIComponent(path)));
  if (!file.startsWith(root + sep)) return notFound(res);
  let body: Buffer;
  try {
    body = await readFile(file);
  } catch {
    return notFound(res);
  }
  res.writeHead(200, {
    'content-type': CONTENT_TYPES[extname(file)] ?? 'application/octet-stream',
    'content-length': body.length,
    'cache-control': path.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
    'x-content-type-options': 'nosniff',
  });
  res.end(body);
}

function notFound(res: ServerResponse): void {
  res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
  res.end('not found\n');
}
