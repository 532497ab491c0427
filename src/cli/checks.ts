import { availableParallelism } from 'node:os';
import { TandemError } from '../errors/index.js';
import { GEMM_TOKENS } from '../kernels/index.js';
import { MAX_PREFILL_PIECE } from '../engine/index.js';

/*
 * Checks of option values shared by several commands. Each throws CLI_USAGE with the command,
 * the option, the value given and what to pass instead.
 */

function usage(command: string, message: string, hint: string): TandemError {
  return new TandemError('CLI_USAGE', `${command}: ${message}`, { hint });
}

/** `value` must be an integer in min..max (inclusive). */
export function checkInteger(
  command: string,
  name: string,
  value: number,
  min: number,
  max: number = Number.MAX_SAFE_INTEGER,
  example = Math.min(Math.max(min, 1), max),
): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    const range =
      max === Number.MAX_SAFE_INTEGER
        ? min === 1
          ? 'a positive integer'
          : `an integer >= ${min}`
        : `an integer in ${min}..${max}`;
    throw usage(command, `--${name} must be ${range}, got ${value}`, `for example --${name} ${example}`);
  }
  return value;
}

/**
 * `--prefill-chunk` (tandem serve, bench serve): prompt tokens a serving step takes beside
 * running streams, from GEMM_TOKENS (a shorter piece would change a prompt's bits) to
 * MAX_PREFILL_PIECE.
 */
export function checkPrefillChunk(command: string, value: number): number {
  return checkInteger(command, 'prefill-chunk', value, GEMM_TOKENS, MAX_PREFILL_PIECE, 32);
}

/**
 * More threads than this only adds spinning workers that fight for the same cores, so it is
 * taken for a typo: 4x the cores this process may use.
 */
export function maxThreads(): number {
  return 4 * availableParallelism();
}

/** Help text for a --threads option: says the bound. */
export const threadsBound = 'at most 4x the cores';

/** --threads: a positive integer, at most maxThreads(). */
export function checkThreads(command: string, value: number): number {
  const max = maxThreads();
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw usage(
      command,
      `--threads must be an integer in 1..${max} (at most 4x the ${availableParallelism()} cores here), got ${value}`,
      `for example --threads ${availableParallelism()}`,
    );
  }
  return value;
}

/** --port of a listening socket: 1..65535. */
export function checkPort(command: string, value: number, name = 'port'): number {
  return checkInteger(command, name, value, 1, 65535, 47600);
}

/** The longest wait a Node timer can express (2^31-1 ms, about 24.8 days); longer ones fire at once. */
export const maxTimerMs = 2 ** 31 - 1;

/** A duration option in seconds: finite, > 0 (or >= 0 with `allowZero`), and at most a timer's range. */
export function checkSeconds(command: string, name: string, value: number, allowZero = false): number {
  const maxSeconds = Math.floor(maxTimerMs / 1000);
  if (!(allowZero ? value >= 0 : value > 0) || value > maxSeconds) {
    throw usage(
      command,
      `--${name} must be ${allowZero ? '>= 0' : '> 0'} and at most ${maxSeconds} seconds (the longest timer Node can set), got ${value}`,
      `pass --${name} in seconds, e.g. --${name} 30`,
    );
  }
  return value;
}

/**
 * A system error from binding a discovery port (in use, or not permitted) as a usage error;
 * anything else is returned unchanged.
 */
export function portBindError(command: string, port: number, error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== 'EADDRINUSE' && code !== 'EACCES') return error;
  const why =
    code === 'EADDRINUSE' ? 'is in use (UDP or TCP) by another process' : 'may not be bound by this user';
  return new TandemError('CLI_USAGE', `${command}: discovery port ${port} ${why}`, {
    hint: 'stop the other agent (`tandem topology --agent`, `tandem init`) or pass another --port, the same on every host',
    details: { port, code },
  });
}
