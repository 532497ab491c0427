import { pino, type Logger } from 'pino';
import pinoPretty from 'pino-pretty';

/** How log lines are written: one JSON object a line (for a log pipeline), or coloured text for people. */
export type LogFormat = 'pretty' | 'json';
export const logFormats = ['pretty', 'json'] as const satisfies readonly LogFormat[];

/** Pretty where a person watches (a terminal), JSON where a program reads (a pipe, a file). */
export function defaultLogFormat(stream: { isTTY?: boolean }): LogFormat {
  return stream.isTTY ? 'pretty' : 'json';
}

/** Where lines go: a file descriptor (1 is stdout), or a stream (tests). */
export type LogDestination = number | NodeJS.WritableStream;

/**
 * A logger writing to `to`, synchronously: a line is written before the call returns, so
 * none is lost when the process exits right after.
 */
export function createLogger(format: LogFormat, to: LogDestination = 1): Logger {
  const options = {
    base: null,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
  };
  if (format === 'json')
    return pino(options, typeof to === 'number' ? pino.destination({ fd: to, sync: true }) : to);
  const colorize = typeof to === 'number' && pinoPretty.isColorSupported;
  return pino(options, pinoPretty({ destination: to, sync: true, singleLine: true, colorize }));
}

/** A logger that writes nothing (a server started without one, tests). */
export function silentLogger(): Logger {
  return pino({ enabled: false });
}
