import { anyJsonObject, compileJsonSchema, type ChatMessage, type JsonNode } from '../engine/index.js';
import { isTandemError } from '../errors/index.js';
import { badRequest } from './errors.js';
import { historyCalls, parseToolChoice, parseTools, type ChatTool, type ToolChoice } from './tools.js';

/*
 * Request bodies of the OpenAI routes, validated once at the edge: each parser takes the
 * parsed JSON and returns a typed request or throws a 400 naming the field. Unknown fields
 * are ignored; `null` counts as absent, as OpenAI's API treats it.
 */

type Body = Record<string, unknown>;

/** What shapes sampling and the end of a generation; shared by both completion routes. */
export interface GenerationParams {
  /** The model the client asked for; undefined when the field is absent. */
  model: string | undefined;
  stream: boolean;
  /** stream_options.include_usage: one more chunk with `choices: []` and `usage`. */
  includeUsage: boolean;
  /** Tokens to generate at most; undefined: what the context leaves after the prompt. */
  maxTokens: number | undefined;
  /** 0..2 (OpenAI's default 1); 0 is greedy. */
  temperature: number;
  /** 0..1; 0 keeps only the most likely token. */
  topP: number;
  seed: number | undefined;
  /** Up to 4 non-empty strings; the returned text ends before the first one found. */
  stop: string[];
  presencePenalty: number;
  frequencyPenalty: number;
  /** logit_bias: token id -> bias in [-100, 100], added to the logits before sampling (ids checked against the vocabulary later). */
  logitBias: Map<number, number>;
  /** Alternatives to report per token (0..20), or undefined for no logprobs at all. */
  logprobs: number | undefined;
  /** response_format: the JSON shape every answer must take, or undefined for free text. */
  responseFormat: JsonNode | undefined;
}

export interface ChatRequest extends GenerationParams {
  messages: ChatMessage[];
  /** The functions the model may call (tools.ts); empty without `tools`. */
  tools: ChatTool[];
  toolChoice: ToolChoice;
}

export interface CompletionRequest extends GenerationParams {
  /** Text to tokenize, or token ids taken as they are. */
  prompt: string | number[];
  /** The prompt's text comes back before the completion's (`echo`). */
  echo: boolean;
}

function present(body: Body, name: string): boolean {
  return body[name] !== undefined && body[name] !== null;
}

function asBody(value: unknown, what: string): Body {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw badRequest(null, `the ${what} body must be a JSON object`);
  }
  return value as Body;
}

function num(body: Body, name: string, min: number, max: number, integer = false): number | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw badRequest(name, `'${name}' must be a number, got ${JSON.stringify(v)}`);
  if (integer && !Number.isInteger(v)) throw badRequest(name, `'${name}' must be an integer, got ${v}`);
  if (v < min || v > max) throw badRequest(name, `'${name}' must be in ${min}..${max}, got ${v}`);
  return v;
}

function bool(body: Body, name: string, param = name): boolean | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'boolean')
    throw badRequest(param, `'${param}' must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function str(body: Body, name: string): string | undefined {
  if (!present(body, name)) return undefined;
  const v = body[name];
  if (typeof v !== 'string') throw badRequest(name, `'${name}' must be a string, got ${JSON.stringify(v)}`);
  return v;
}

function stopStrings(body: Body): string[] {
  if (!present(body, 'stop')) return [];
  const v = body.stop;
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) {
    throw badRequest('stop', `'stop' must be a string or an array of strings, got ${JSON.stringify(v)}`);
  }
  if (list.length > 4) throw badRequest('stop', `'stop' holds at most 4 strings, got ${list.length}`);
  if (list.some((s) => s === '')) throw badRequest('stop', "'stop' strings must not be empty");
  return list as string[];
}

function streamOptions(body: Body): boolean {
  if (!present(body, 'stream_options')) return false;
  const o = body.stream_options;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw badRequest('stream_options', `'stream_options' must be an object, got ${JSON.stringify(o)}`);
  }
  return bool(o as Body, 'include_usage', 'stream_options.include_usage') ?? false;
}

/** The fields both routes share. `maxTokenFields` lists the names that set the token limit. */
function generationParams(body: Body, maxTokenFields: readonly string[]): Omit<GenerationParams, 'logprobs'> {
  const n = num(body, 'n', 1, Number.MAX_SAFE_INTEGER, true);
  if (n !== undefined && n !== 1)
    throw badRequest(
      'n',
      `'n' must be 1: this server returns one choice per request (got ${n})`,
      'send n separate requests',
    );
  let maxTokens: number | undefined;
  for (const name of maxTokenFields)
    maxTokens = num(body, name, 1, Number.MAX_SAFE_INTEGER, true) ?? maxTokens;
  const seed = num(body, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true);
  return {
    model: str(body, 'model'),
    stream: bool(body, 'stream') ?? false,
    includeUsage: streamOptions(body),
    maxTokens,
    temperature: num(body, 'temperature', 0, 2) ?? 1,
    topP: num(body, 'top_p', 0, 1) ?? 1,
    // the sampler takes a 32-bit unsigned seed; OpenAI's may be any integer
    seed: seed === undefined ? undefined : ((seed % 2 ** 32) + 2 ** 32) % 2 ** 32,
    stop: stopStrings(body),
    presencePenalty: num(body, 'presence_penalty', -2, 2) ?? 0,
    frequencyPenalty: num(body, 'frequency_penalty', -2, 2) ?? 0,
    logitBias: logitBias(body),
    responseFormat: responseFormat(body),
  };
}

/**
 * response_format: {"type": "text"}, {"type": "json_object"} (any JSON object) or
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}; a schema keyword the
 * constraint cannot enforce is a 400 naming it.
 */
function responseFormat(body: Body): JsonNode | undefined {
  if (!present(body, 'response_format')) return undefined;
  const v = body.response_format;
  const types = '"text", "json_object" or "json_schema"';
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw badRequest(
      'response_format',
      `'response_format' must be an object with a "type", got ${JSON.stringify(v)}`,
    );
  const f = v as Body;
  if (f.type === 'text') return undefined;
  if (f.type === 'json_object') return anyJsonObject();
  if (f.type !== 'json_schema')
    throw badRequest(
      'response_format.type',
      `'response_format.type' must be ${types}, got ${JSON.stringify(f.type)}`,
    );
  const spec = f.json_schema;
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec) || !present(spec as Body, 'schema'))
    throw badRequest(
      'response_format.json_schema',
      `'response_format.json_schema' must be an object with a "schema", got ${JSON.stringify(spec)}`,
    );
  try {
    return compileJsonSchema((spec as Body).schema);
  } catch (error) {
    if (isTandemError(error) && error.code === 'JSON_SCHEMA_UNSUPPORTED')
      throw badRequest('response_format.json_schema.schema', error.message, error.hint);
    throw error;
  }
}

/** logit_bias: an object of token ids (as strings, as JSON keys are) to numbers in [-100, 100]; at most 1024 entries. */
function logitBias(body: Body): Map<number, number> {
  const out = new Map<number, number>();
  if (!present(body, 'logit_bias')) return out;
  const v = body.logit_bias;
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw badRequest(
      'logit_bias',
      `'logit_bias' must be an object of token ids to biases, got ${JSON.stringify(v)}`,
    );
  const entries = Object.entries(v as Body);
  if (entries.length > 1024)
    throw badRequest('logit_bias', `'logit_bias' holds at most 1024 tokens, got ${entries.length}`);
  for (const [key, bias] of entries) {
    if (!/^(0|[1-9][0-9]{0,9})$/.test(key))
      throw badRequest('logit_bias', `'logit_bias' keys must be token ids, got ${JSON.stringify(key)}`);
    if (typeof bias !== 'number' || !Number.isFinite(bias) || bias < -100 || bias > 100)
      throw badRequest(
        'logit_bias',
        `'logit_bias' values must be numbers in -100..100, got ${JSON.stringify(bias)} for token ${key}`,
      );
    out.set(Number(key), bias);
  }
  return out;
}

/** A message's content: a string, or text parts (`[{type: 'text', text}]`) joined. */
function content(value: unknown, param: string): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (!Array.isArray(value))
    throw badRequest(param, `'${param}' must be a string or an array of content parts`);
  return value
    .map((part: unknown, j) => {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (p === null || typeof p !== 'object' || p.type !== 'text' || typeof p.text !== 'string') {
        throw badRequest(
          `${param}[${j}]`,
          `'${param}[${j}]' must be a text part {"type":"text","text":"..."}: this server reads text only`,
        );
      }
      return p.text;
    })
    .join('');
}

function messages(body: Body): ChatMessage[] {
  const list = body.messages;
  if (!Array.isArray(list) || list.length === 0)
    throw badRequest('messages', "'messages' must be a non-empty array of {role, content}");
  return list.map((m: unknown, i) => {
    if (m === null || typeof m !== 'object' || Array.isArray(m))
      throw badRequest(`messages[${i}]`, `'messages[${i}]' must be an object {role, content}`);
    const role = (m as Body).role;
    if (typeof role !== 'string' || role === '')
      throw badRequest(`messages[${i}].role`, `'messages[${i}].role' must be a non-empty string`);
    const message: ChatMessage = { role, content: content((m as Body).content, `messages[${i}].content`) };
    const calls = historyCalls((m as Body).tool_calls, `messages[${i}].tool_calls`);
    if (calls !== undefined) message.tool_calls = calls;
    const answers = (m as Body).tool_call_id;
    if (typeof answers === 'string') message.tool_call_id = answers;
    return message;
  });
}

export function parseChatRequest(value: unknown): ChatRequest {
  const body = asBody(value, 'chat completion');
  const logprobs = bool(body, 'logprobs') ?? false;
  const top = num(body, 'top_logprobs', 0, 20, true);
  if (top !== undefined && !logprobs)
    throw badRequest('top_logprobs', "'top_logprobs' needs 'logprobs': true");
  const params = generationParams(body, ['max_tokens', 'max_completion_tokens']);
  const tools = parseTools(body);
  const toolChoice = parseToolChoice(body, tools);
  if (params.responseFormat !== undefined && (toolChoice === 'required' || typeof toolChoice === 'object'))
    throw badRequest(
      'response_format',
      "'response_format' and a 'tool_choice' that forces a call both set the answer's shape",
      'send one of the two',
    );
  return {
    ...params,
    messages: messages(body),
    logprobs: logprobs ? (top ?? 0) : undefined,
    tools,
    toolChoice,
  };
}

function prompt(body: Body): string | number[] {
  const v = body.prompt;
  if (typeof v === 'string') return v;
  // a list of one string is one prompt; token ids are an array of integers
  if (Array.isArray(v) && v.length === 1 && typeof v[0] === 'string') return v[0];
  if (Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t) && (t as number) >= 0))
    return v as number[];
  if (Array.isArray(v) && v.length > 1 && v.every((t) => typeof t === 'string' || Array.isArray(t))) {
    throw badRequest(
      'prompt',
      `'prompt' holds ${v.length} prompts; this server takes one per request`,
      'send one request per prompt',
    );
  }
  throw badRequest('prompt', "'prompt' must be a string or a non-empty array of token ids");
}

export function parseCompletionRequest(value: unknown): CompletionRequest {
  const body = asBody(value, 'completion');
  // the legacy route's logprobs is the count of alternatives itself (0..5)
  const logprobs = num(body, 'logprobs', 0, 5, true);
  const echo = bool(body, 'echo') ?? false;
  if (echo && logprobs !== undefined)
    throw badRequest(
      'echo',
      "'echo' with 'logprobs' is not supported: the prompt's own logprobs are not computed",
      "drop 'logprobs', or 'echo' and prepend the prompt yourself",
    );
  const bestOf = num(body, 'best_of', 1, Number.MAX_SAFE_INTEGER, true);
  if (bestOf !== undefined && bestOf !== 1)
    throw badRequest(
      'best_of',
      `'best_of' must be 1: this server returns one completion per request (got ${bestOf})`,
    );
  const suffix = str(body, 'suffix');
  if (suffix !== undefined && suffix !== '')
    throw badRequest('suffix', "'suffix' is not supported: this server completes text at its end only");
  return { ...generationParams(body, ['max_tokens']), prompt: prompt(body), logprobs, echo };
}

/** POST /tokenize: `{content, add_special?}` as llama-server takes it. */
export function parseTokenizeRequest(value: unknown): { content: string; addSpecial: boolean | undefined } {
  const body = asBody(value, 'tokenize');
  const text = str(body, 'content');
  if (text === undefined) throw badRequest('content', "'content' must be a string");
  return { content: text, addSpecial: bool(body, 'add_special') };
}

/** POST /detokenize: `{tokens: [ids]}`. */
export function parseDetokenizeRequest(value: unknown): { tokens: number[] } {
  const body = asBody(value, 'detokenize');
  const tokens = body.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t) && (t as number) >= 0)) {
    throw badRequest('tokens', "'tokens' must be an array of token ids (non-negative integers)");
  }
  return { tokens: tokens as number[] };
}
