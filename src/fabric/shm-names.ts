import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PosixAbi } from './posix-abi.js';

/**
 * The names of the shared-memory segments on this host that tandem may sweep (those whose
 * creating process died without removing them). Linux lists every POSIX shared-memory object
 * as a file in /dev/shm, so nothing needs keeping. macOS cannot list them, so each segment
 * tandem creates is also noted as an empty file in a directory of this user's, removed when
 * the segment is; a segment of a SIGKILLed process keeps its note until the next sweep.
 * Names are as shm_open takes them: '/tandem-<pid>-<random>-<kind>'.
 */
export interface ShmNames {
  /** Notes a segment just created (nothing where the system lists them itself). */
  add(name: string): void;
  /** Forgets a segment just unlinked. */
  remove(name: string): void;
  /** Every tandem segment name this host shows, each with its leading '/'. */
  list(): string[];
}

const TANDEM = /^tandem-[0-9]+-/;

class DevShmNames implements ShmNames {
  add(): void {}
  remove(): void {}
  list(): string[] {
    try {
      return readdirSync('/dev/shm')
        .filter((n) => TANDEM.test(n))
        .map((n) => '/' + n);
    } catch {
      return [];
    }
  }
}

/** The notes kept in `dir` (one empty file per segment, named as the segment without its '/'). */
export class RegistryShmNames implements ShmNames {
  constructor(readonly dir: string) {}

  add(name: string): void {
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      writeFileSync(join(this.dir, name.slice(1)), '');
    } catch {
      // a note that cannot be written costs a sweep of this segment, nothing else
    }
  }

  remove(name: string): void {
    rmSync(join(this.dir, name.slice(1)), { force: true });
  }

  list(): string[] {
    try {
      return readdirSync(this.dir)
        .filter((n) => TANDEM.test(n))
        .map((n) => '/' + n);
    } catch {
      return [];
    }
  }
}

/** This platform's way of knowing the segments (see ShmNames). */
export function shmNamesFor(abi: PosixAbi): ShmNames {
  if (abi.shmListing === 'dev-shm') return new DevShmNames();
  const uid = process.getuid?.() ?? 0;
  return new RegistryShmNames(join(tmpdir(), `tandem-shm-${uid}`));
}
