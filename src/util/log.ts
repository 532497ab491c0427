import { pino, type Logger } from 'pino';
import pinoPretty from 'pino-pretty';

/** How log lines are written: one JSON object a line (for a log pipeline), or coloured text for people. */
export type LogFormat = 'pretty' | 'json';
export const logFormats = ['pretty', 'json'] as const satisfies readonly LogFormat[];

/** Pretty where a person watches (a terminal), JSON where a program reads (a pipe, a file). */
export function defaultLogFormat(stream: { isTTY?: boolean }): LogFormat {
  return stream.isTTY ? 'pretty' : 'json';
}

/**
 * A logger writing to file descriptor `fd`, synchronously: a line is written before the call
 * returns, so none is lost when the process exits right after.
 */
export function createLogger(format: LogFormat, fd = 1): Logger {
  const options = {
    base: null,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
  };
  if (format === 'json') return pino(options, pino.destination({ fd, sync: true }));
  return pino(
    options,
    pinoPretty({ destination: fd, sync: true, singleLine: true, colorize: pinoPretty.isColorSupported }),
  );
}

/** A logger that writes nothing (a server started without one, tests). */
export function silentLogger(): Logger {
  return pino({ enabled: false });
}
