import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { libcProblem, ShmSegment, sweepStale } from './shm-ffi.js';
import { RegistryShmNames } from './shm-names.js';

const skip = libcProblem();

/** A pid that is certainly gone: a child that has exited. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
    encoding: 'utf8',
  });
  return Number(r.stdout);
}

describe('shm names kept in a registry (the macOS way, run here)', () => {
  it('notes, lists and forgets segment names; ignores files that are not tandem segments', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-names-'));
    try {
      const names = new RegistryShmNames(join(dir, 'registry'));
      assert.deepEqual(names.list(), [], 'an absent directory lists nothing');
      names.add('/tandem-1-ab-ring');
      names.add('/tandem-2-cd-mr');
      names.add('/other-thing');
      assert.deepEqual(names.list().sort(), ['/tandem-1-ab-ring', '/tandem-2-cd-mr']);
      names.remove('/tandem-1-ab-ring');
      names.remove('/tandem-9-never-mr');
      assert.deepEqual(names.list(), ['/tandem-2-cd-mr']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(
    'the sweep unlinks the segments a dead process left, as the registry lists them, and spares the living',
    { skip },
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'tandem-names-'));
      const names = new RegistryShmNames(dir);
      const dead = `/tandem-${deadPid()}-5eed-ring`;
      const mine = ShmSegment.create(`/tandem-${process.pid}-5eed-mr`, 4096);
      try {
        // a segment that outlived its process: made here under the dead pid's name, then noted
        ShmSegment.create(dead, 4096);
        names.add(dead);
        names.add(mine.name);
        assert.equal(sweepStale(names), 1);
        assert.deepEqual(names.list(), [mine.name]);
        assert.equal(existsSync(`/dev/shm${dead}`), false, "the dead process's segment is gone");
        assert.equal(existsSync(`/dev/shm${mine.name}`), true, 'a living process keeps its segment');
        assert.deepEqual(readdirSync(dir), [mine.name.slice(1)]);
      } finally {
        mine.unmap();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
