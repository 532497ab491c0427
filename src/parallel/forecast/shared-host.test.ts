import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Calibration } from './machine-list.js';
import { lockstepRounds, measuredLink, pipelinePrefillMs, sharedHostMachines } from './shared-host.js';

const cal = (threads: number, decodeGBs: number, prefillGflops: number): Calibration => ({
  date: '2026-11-28',
  threads,
  memoryBytes: 24e9,
  cpuCores: 2,
  decodeBytesPerS: decodeGBs * 1e9,
  prefillFlopsPerS: prefillGflops * 1e9,
  layerOverheadMs: 0.1,
});

describe('several nodes on one host', () => {
  it("each node's layers stream at its own calibration's share of the rate it gets", () => {
    const rates = sharedHostMachines({
      nodes: 2,
      perNode: { ...cal(1, 6, 20), decodeLayerShare: 0.8 },
      together: { ...cal(2, 8, 40), decodeLayerShare: 0.5 },
      cores: 2,
      concurrent: true,
    })[0]!.rates!;
    assert.equal(rates.decodeBytesPerS, 4e9);
    assert.equal(rates.decodeLayerShare, 0.8);
  });

  it("the prefill probe's attention rate is shared as the GEMMs' are, by ranks that run at once only", () => {
    const probed = (threads: number, attention: number): Calibration => ({
      ...cal(threads, 6, 20),
      prefillAttentionFlopsPerS: attention * 1e9,
      prefillShape: { hidden: 2048, heads: 32, kvHeads: 4, headDim: 64, ff: 5632, tokens: 128 },
    });
    const at = (concurrent: boolean) =>
      sharedHostMachines({
        nodes: 2,
        perNode: probed(1, 10),
        together: probed(2, 12),
        cores: 2,
        concurrent,
      })[0]!.rates!;
    assert.equal(at(true).prefillAttentionFlopsPerS, 6e9);
    assert.equal(at(false).prefillAttentionFlopsPerS, 10e9);
    assert.equal(at(true).prefillWidth, 2048);
  });

  it('each node gets the lesser of its own rate and its share of what the host gives all at once', () => {
    // one thread streams 6 GB/s, two together 8: two nodes get 4 each, not 6
    const two = sharedHostMachines({
      nodes: 2,
      perNode: cal(1, 6, 20),
      together: cal(2, 8, 40),
      cores: 2,
      concurrent: true,
    });
    assert.equal(two.length, 2);
    assert.deepEqual(
      two.map((m) => m.name),
      ['this-node-1', 'this-node-2'],
    );
    assert.equal(two[0]!.rates!.decodeBytesPerS, 4e9);
    assert.equal(two[0]!.rates!.prefillFlopsPerS, 20e9);
    assert.equal(two[0]!.rates!.layerOverheadMs, 0.1);
    // a calibration without the decode probe reads its layers at the stream rate
    assert.equal(two[0]!.rates!.decodeLayerShare, 1);
    assert.equal(two[0]!.memory.gb, 12);
    // a host that scales perfectly leaves each node its own rate
    const ideal = sharedHostMachines({
      nodes: 2,
      perNode: cal(1, 6, 20),
      together: cal(2, 14, 40),
      cores: 2,
      concurrent: true,
    });
    assert.equal(ideal[0]!.rates!.decodeBytesPerS, 6e9);
  });

  it('pipeline stages that take turns do not share: each streams at what one node alone gets', () => {
    const pp = sharedHostMachines({
      nodes: 3,
      perNode: cal(1, 6, 20),
      together: cal(2, 8, 40),
      cores: 2,
      concurrent: false,
    });
    assert.equal(pp[0]!.rates!.decodeBytesPerS, 6e9);
    assert.equal(pp[0]!.rates!.prefillFlopsPerS, 20e9);
    assert.equal(pp[0]!.rates!.layerOverheadMs, 0.1);
  });

  it('more threads than cores: the nodes take turns in rounds, each at the rate of those running', () => {
    const three = sharedHostMachines({
      nodes: 3,
      perNode: cal(1, 6, 20),
      together: cal(2, 9, 36),
      cores: 2,
      concurrent: true,
    });
    // rounds of 2 nodes then 1: a share at min(6, 9 / 2) GB/s, then at 6 (one node alone)
    const near = (a: number, b: number): boolean => Math.abs(a - b) < 1e-6 * b;
    assert.ok(near(three[2]!.rates!.decodeBytesPerS, 1 / (1 / 4.5e9 + 1 / 6e9)));
    assert.ok(near(three[2]!.rates!.prefillFlopsPerS, 1 / (1 / 18e9 + 1 / 20e9)));
    // the fixed costs once a round
    assert.ok(near(three[2]!.rates!.layerOverheadMs, 0.2));
    // below the fair share of the host's rate (9 / 3 GB/s): the third node runs alone
    assert.ok(three[2]!.rates!.decodeBytesPerS < 3e9);
  });

  it('lockstepRounds: nodes that fit run at once; the rest in rounds of what the cores hold', () => {
    assert.deepEqual(lockstepRounds(2, 1, 2), [2]);
    assert.deepEqual(lockstepRounds(3, 1, 2), [2, 1]);
    assert.deepEqual(lockstepRounds(4, 1, 2), [2, 2]);
    assert.deepEqual(lockstepRounds(2, 2, 2), [1, 1]);
    assert.deepEqual(lockstepRounds(3, 2, 8), [3]);
    // a node with more threads than cores still runs, alone
    assert.deepEqual(lockstepRounds(2, 4, 2), [1, 1]);
  });

  it("a pipeline's prefill: only its middle slots run every stage at once", () => {
    // 3 stages, 4 pieces: 6 slots with 1, 2, 3, 3, 2, 1 stages computing; all at once each
    // stage takes 1.5x its time alone (3 on 2 cores): 2 stages each get 3 x (1/1.5) / 2 = 1
    const three = pipelinePrefillMs({ stages: 3, pieces: 4, aloneMs: 600, togetherMs: 900 });
    assert.ok(Math.abs(three - (600 / 6) * (1 + 1 + 1.5 + 1.5 + 1 + 1)) < 1e-9);
    // a host that does not slow stages down together: the forecast alone; 2 stages sharing
    // 1.2x: the 3 middle slots stretch, the first and last do not
    assert.equal(pipelinePrefillMs({ stages: 2, pieces: 4, aloneMs: 500, togetherMs: 500 }), 500);
    const two = pipelinePrefillMs({ stages: 2, pieces: 4, aloneMs: 500, togetherMs: 600 });
    assert.ok(two > 500 && two < 600, `${two}`);
    assert.ok(Math.abs(two - 100 * (1 + 1.2 * 3 + 1)) < 1e-9);
    // a lone piece passes the stages one at a time: nothing shared
    assert.equal(pipelinePrefillMs({ stages: 3, pieces: 1, aloneMs: 300, togetherMs: 450 }), 300);
  });

  it('the measured link: a small all-reduce is one step, a large one adds its bytes over the bandwidth', () => {
    const link = measuredLink({ provider: 'shm', smallUs: 10, largeBytes: 1e6, largeUs: 510 });
    assert.equal(link.latencyUs, 10);
    assert.equal(link.bandwidthGBs, 2);
    assert.equal(link.id, 'local-shm');
  });
});
