import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { NetnsRig, rigUnavailable, sweepStaleNamespaces } from './netns-rig.js';

/*
 * A path that goes down under a tcp connection on which neither end sends: two namespaces
 * joined by a cable, a queue pair between them, each end waiting on one receive with nothing
 * of its own in flight. `ip link set down` on one end must still fail both receives with
 * peer_lost within 3 s (the fabric's promise: a dead path is a typed error on every survivor
 * within seconds). Data unacknowledged for the user timeout covers only an end that sends; an
 * end that only waits learns of the path from keepalive probes going unanswered. A pipeline's
 * last stage is such an end: it waits for activations its upstream cannot deliver.
 */

const skip = rigUnavailable();
if (!skip) sweepStaleNamespaces();
const peer = join(import.meta.dirname, 'fabric-idle-peer.ts');

test(
  'tcp: a link down under a queue pair where neither end sends fails both ends with peer_lost within 3 s',
  { skip, timeout: 60_000 },
  async () => {
    const rig = new NetnsRig();
    try {
      rig.addHost('a');
      rig.addHost('b');
      const cable = rig.cable('a', 'b');
      rig.addAddress('a', cable.aIf, '10.82.1.1/24');
      rig.addAddress('b', cable.bIf, '10.82.1.2/24');
      const listening = rig.node('b', ['--import', 'tsx', peer, 'listen', '10.82.1.2', '7210']);
      await listening.waitFor((l) => l.listening === true, 30_000, 'the listener');
      const ends = [listening, rig.node('a', ['--import', 'tsx', peer, 'connect', '10.82.1.2', '7210'])];
      for (const end of ends) await end.waitFor((l) => l.ready === true, 30_000, 'the queue pair');
      // past the handshake's last bytes: both ends idle, nothing unacknowledged on either
      await new Promise((r) => setTimeout(r, 1500));
      const downAt = Date.now();
      rig.setLink('a', cable.aIf, false);
      for (const end of ends) {
        const done = await end.waitFor((l) => typeof l.status === 'string', 20_000, 'the receive to end');
        assert.equal(done.status, 'peer_lost', `${end.host}: ${JSON.stringify(done)}`);
        const ms = (done.at as number) - downAt;
        assert.ok(ms <= 3000 + 1000, `${end.host}: seen ${ms} ms after the link went down`);
      }
    } finally {
      await rig.cleanup();
    }
  },
);
