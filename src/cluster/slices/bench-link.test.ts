import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { parseRate, ShapedLink } from './bench-link.js';

const namespaces = (): string => execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
const canRig = process.platform === 'linux' && process.getuid?.() === 0;

describe('bench slices --link', () => {
  it('reads tc rates as bytes per second and refuses what is not one', () => {
    assert.equal(parseRate('10gbit'), 1.25e9);
    assert.equal(parseRate('2.5gbit'), 312.5e6);
    assert.equal(parseRate('940mbit'), 117.5e6);
    for (const bad of ['10', '10gb', 'fast', '0.5kbit', '-1gbit', '500gbit'])
      assert.throws(
        () => parseRate(bad),
        (e: unknown) => isTandemError(e, 'CLI_BENCH_LINK') && e.message.includes(`'${bad}'`),
      );
  });

  it(
    'builds a namespace behind a shaped veth pair that the member reaches, and removes it',
    { skip: canRig ? false : 'needs root on Linux' },
    async () => {
      const link = ShapedLink.open('1gbit');
      const server = createServer((s) => s.destroy());
      await new Promise<void>((resolve) => server.listen(0, link.here, resolve));
      const port = (server.address() as AddressInfo).port;
      try {
        assert.match(namespaces(), new RegExp(`^${link.ns}\\b`, 'm'));
        const qdisc = execFileSync('ip', ['netns', 'exec', link.ns, 'tc', 'qdisc', 'show'], {
          encoding: 'utf8',
        });
        assert.match(qdisc, /tbf .*rate 1Gbit/);
        // a process inside the namespace reaches the coordinator's side: the pair is up and addressed
        const reach = `require('net').connect(${port}, '${link.here}').on('connect', () => process.exit(0)).on('error', () => process.exit(3))`;
        const [cmd, ...args] = link.inside([process.execPath, '-e', reach]);
        const r = spawnSync(cmd!, args, { timeout: 10_000 });
        assert.equal(r.status, 0);
        assert.deepEqual(link.inside(['true']), ['ip', 'netns', 'exec', link.ns, 'true']);
      } finally {
        server.close();
        link.close();
      }
      assert.doesNotMatch(namespaces(), new RegExp(`^${link.ns}\\b`, 'm'));
    },
  );
});
