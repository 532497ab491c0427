import type { ErrorCategory } from './category.js';

/** Error codes raised by the command line, each with its category. */
export const cliCodes = {
  CLI_USAGE: 'invalid_usage',
  CLI_UNKNOWN_COMMAND: 'invalid_usage',
  /** `chat`: a message (with the answer's room) that does not fit the model's context. */
  CLI_CHAT_CONTEXT: 'invalid_argument',
  /** `chat --url`: not an http(s) URL. */
  CLI_CHAT_BAD_URL: 'invalid_argument',
  /** `chat --url`: nothing answers at the URL, or not as an OpenAI-compatible server. */
  CLI_CHAT_UNREACHABLE: 'system',
  /** `chat --url`: the server refused the API key (401/403). */
  CLI_CHAT_AUTH: 'invalid_usage',
  /** `chat --url`: the server does not serve the model named. */
  CLI_CHAT_MODEL: 'invalid_argument',
  /** `chat --url`: the server answered a request with an error. */
  CLI_CHAT_SERVER: 'remote',
  /** `top`: nothing answers at --url, or not as a tandem server (no dashboard event stream). */
  CLI_TOP_UNREACHABLE: 'system',
  /** `top`: the server refused the API key (401/403). */
  CLI_TOP_AUTH: 'invalid_usage',
  /** `bench slices --link`: not a rate, or the shaped link cannot be built here (not root, no tc). */
  CLI_BENCH_LINK: 'invalid_usage',
} as const satisfies Record<string, ErrorCategory>;
