import { randomBytes } from 'node:crypto';
import { compileJsonSchema, type ChatMessage, type JsonNode } from '../engine/index.js';
import { isTandemError } from '../errors/index.js';
import { badRequest } from './errors.js';

/*
 * Function calling on /v1/chat/completions: `tools`, `tool_choice`, and the history of calls
 * (assistant `tool_calls`, `tool` results). A call is the JSON object
 * {"name": ..., "arguments": {...}}: with tool_choice "required" or a named function the
 * answer is held to that shape by the JSON constraint (arguments to the tool's parameters
 * schema); with "auto" the model answers freely and an answer that consists of calls, in one
 * of the forms models write them (readToolCalls), is returned as those calls.
 */

type Body = Record<string, unknown>;

export interface ChatTool {
  name: string;
  description: string | undefined;
  /** The tool's `parameters` JSON Schema as sent (an object schema; `{}` when absent). */
  parameters: Record<string, unknown>;
}

/** none: tools are not offered; auto: the model may call one; required: it must; {name}: it must call that one. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

function isBody(v: unknown): v is Body {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `tools`: [{type: "function", function: {name, description?, parameters?}}], names unique. */
export function parseTools(body: Body): ChatTool[] {
  const v = body.tools;
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw badRequest('tools', `'tools' must be an array, got ${JSON.stringify(v)}`);
  const seen = new Set<string>();
  return v.map((t: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isBody(t) || t.type !== 'function' || !isBody(t.function))
      throw badRequest(at, `'${at}' must be {"type": "function", "function": {"name", "parameters"}}`);
    const f = t.function;
    if (typeof f.name !== 'string' || !NAME.test(f.name))
      throw badRequest(
        `${at}.function.name`,
        `'${at}.function.name' must be 1-64 letters, digits, _ or -, got ${JSON.stringify(f.name)}`,
      );
    if (seen.has(f.name))
      throw badRequest(
        `${at}.function.name`,
        `two tools are named '${f.name}'`,
        'give each tool its own name',
      );
    seen.add(f.name);
    if (f.description !== undefined && f.description !== null && typeof f.description !== 'string')
      throw badRequest(`${at}.function.description`, `'${at}.function.description' must be a string`);
    const parameters = f.parameters ?? {};
    if (!isBody(parameters))
      throw badRequest(
        `${at}.function.parameters`,
        `'${at}.function.parameters' must be a JSON Schema object`,
      );
    return {
      name: f.name,
      description: typeof f.description === 'string' ? f.description : undefined,
      parameters,
    };
  });
}

/** `tool_choice`: "none", "auto", "required" or {type: "function", function: {name}} (default: auto with tools). */
export function parseToolChoice(body: Body, tools: readonly ChatTool[]): ToolChoice {
  const v = body.tool_choice;
  if (v === undefined || v === null) return tools.length > 0 ? 'auto' : 'none';
  let choice: ToolChoice;
  if (v === 'none' || v === 'auto' || v === 'required') choice = v;
  else if (isBody(v) && v.type === 'function' && isBody(v.function) && typeof v.function.name === 'string')
    choice = { name: v.function.name };
  else
    throw badRequest(
      'tool_choice',
      `'tool_choice' must be "none", "auto", "required" or {"type": "function", "function": {"name"}}, got ${JSON.stringify(v)}`,
    );
  if (choice !== 'none' && tools.length === 0)
    throw badRequest('tool_choice', `'tool_choice' ${JSON.stringify(v)} needs 'tools'`);
  if (typeof choice === 'object' && !tools.some((t) => t.name === choice.name))
    throw badRequest('tool_choice', `'tool_choice' names '${choice.name}', which is not among 'tools'`);
  return choice;
}

/**
 * The JSON shape a forced call takes: one object per offered tool (all of them for
 * "required", the named one otherwise), {"name": that name, "arguments": its parameters}.
 * A parameters keyword the constraint cannot enforce is a 400 naming the tool.
 */
export function callShape(tools: readonly ChatTool[], choice: ToolChoice): JsonNode | undefined {
  if (choice === 'none' || choice === 'auto') return undefined;
  const offered = typeof choice === 'object' ? tools.filter((t) => t.name === choice.name) : tools;
  const options = offered.map((t) => {
    const index = tools.indexOf(t);
    // a schema with no type (`{}`) takes any JSON: a call's arguments are always an object
    const parameters = Object.keys(t.parameters).length === 0 ? { type: 'object' } : t.parameters;
    try {
      compileJsonSchema(parameters);
    } catch (e) {
      if (isTandemError(e, 'JSON_SCHEMA_UNSUPPORTED'))
        throw badRequest(`tools[${index}].function.parameters`, e.message, e.hint);
      throw e;
    }
    return {
      type: 'object',
      properties: { name: { const: t.name }, arguments: parameters },
      required: ['name', 'arguments'],
      additionalProperties: false,
    };
  });
  return compileJsonSchema(options.length === 1 ? options[0] : { anyOf: options });
}

/** The tools as OpenAI's request lists them: what a chat template that takes `tools` reads. */
export function templateTools(tools: readonly ChatTool[]): object[] {
  return tools.map((t) => ({
    type: 'function',
    function: {
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      parameters: t.parameters,
    },
  }));
}

/**
 * For a template that does not read `tools`: a system message that lists them and says how to
 * call one, merged into the first system message when there is one.
 */
export function withToolsMessage(
  messages: readonly ChatMessage[],
  tools: readonly ChatTool[],
): ChatMessage[] {
  const list = tools
    .map((t) => JSON.stringify({ name: t.name, description: t.description ?? '', parameters: t.parameters }))
    .join('\n');
  const text =
    'You can call these functions:\n' +
    list +
    '\nTo call one, answer with only a JSON object {"name": <function name>, "arguments": <object>}.';
  const [first, ...rest] = messages;
  if (first?.role === 'system') return [{ role: 'system', content: `${first.content}\n\n${text}` }, ...rest];
  return [{ role: 'system', content: text }, ...messages];
}

const HERMES_OPEN = '<tool_call>';
const HERMES_CLOSE = '</tool_call>';
const MISTRAL_MARK = '[TOOL_CALLS]';

/** One call object {"name": one of the tools, "arguments" (or llama-style "parameters"): an object}. */
function callOf(value: unknown, tools: readonly ChatTool[]): ToolCall | undefined {
  if (!isBody(value) || typeof value.name !== 'string') return undefined;
  const args = value.arguments ?? value.parameters;
  if (!isBody(args) || !tools.some((t) => t.name === value.name)) return undefined;
  return {
    id: `call_${randomBytes(12).toString('hex')}`,
    type: 'function',
    function: { name: value.name, arguments: JSON.stringify(args) },
  };
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * The calls an answer consists of, in the forms models write them: one call object (the shape
 * a forced call takes; Llama 3.1's), a JSON array of them (Mistral's, after its `[TOOL_CALLS]`
 * mark when that is rendered), or `<tool_call>` blocks each holding one (Hermes', Qwen 2.5's).
 * An answer with anything else beside them, or a call naming no offered tool, is text
 * (undefined).
 */
export function readToolCalls(text: string, tools: readonly ChatTool[]): ToolCall[] | undefined {
  let t = text.trim();
  if (t.startsWith(MISTRAL_MARK)) t = t.slice(MISTRAL_MARK.length).trim();
  let values: unknown[];
  if (t.startsWith(HERMES_OPEN)) {
    values = [];
    while (t.startsWith(HERMES_OPEN)) {
      const close = t.indexOf(HERMES_CLOSE);
      if (close < 0) return undefined;
      values.push(parsed(t.slice(HERMES_OPEN.length, close)));
      t = t.slice(close + HERMES_CLOSE.length).trim();
    }
    if (t !== '') return undefined;
  } else if (t.startsWith('[') || t.startsWith('{')) {
    const v = parsed(t);
    values = Array.isArray(v) ? v : [v];
  } else return undefined;
  const calls = values.map((v) => callOf(v, tools));
  return calls.length > 0 && calls.every((c) => c !== undefined) ? (calls as ToolCall[]) : undefined;
}

/** How far a call object's text has come, offsets into the text it was read from. */
export interface CallProgress {
  /** The name, once its string is whole. */
  name?: string;
  /** Offset of the arguments value's first character (`arguments`, or Llama's `parameters`), once it has begun. */
  argsStart?: number;
  /** Offset just past the arguments value, once it is whole. */
  argsEnd?: number;
  /** Offset just past the object's closing brace, once it is whole. */
  end?: number;
}

const WS = new Set([' ', '\t', '\n', '\r']);

/** Offset of the first non-blank character of `text` at or after `i`. */
function skipWs(text: string, i: number): number {
  while (i < text.length && WS.has(text[i] as string)) i++;
  return i;
}

/** The end of the JSON string whose opening quote is at `at`, or -1 while it is unfinished. */
function stringEnd(text: string, at: number): number {
  for (let k = at + 1; k < text.length; k++) {
    if (text[k] === '\\') k++;
    else if (text[k] === '"') return k + 1;
  }
  return -1;
}

/** The end of the JSON value starting at `at`, or -1 while it is unfinished (a number may still grow). */
function valueEnd(text: string, at: number): number {
  const c = text[at];
  if (c === '"') return stringEnd(text, at);
  if (c !== '{' && c !== '[') {
    let k = at;
    while (k < text.length && !WS.has(text[k] as string) && !',}]'.includes(text[k] as string)) k++;
    return k < text.length ? k : -1;
  }
  let depth = 0;
  for (let k = at; k < text.length; k++) {
    const ch = text[k];
    if (ch === '"') {
      const e = stringEnd(text, k);
      if (e < 0) return -1;
      k = e - 1;
    } else if (ch === '{' || ch === '[') depth++;
    else if ((ch === '}' || ch === ']') && --depth === 0) return k + 1;
  }
  return -1;
}

/**
 * Reads the call object {"name": ..., "arguments": ...} that starts at `at` of `text` (keys
 * in any order, JSON whitespace anywhere, other keys' values skipped) as far as it has come.
 * Text that is not such an object gives what was read before it went wrong.
 */
export function callProgress(text: string, at = 0): CallProgress {
  const out: CallProgress = {};
  let i = skipWs(text, at);
  if (text[i] !== '{') return out;
  i = skipWs(text, i + 1);
  if (text[i] === '}') return { ...out, end: i + 1 };
  for (;;) {
    if (text[i] !== '"') return out;
    const keyEnd = stringEnd(text, i);
    if (keyEnd < 0) return out;
    const key = parsed(text.slice(i, keyEnd));
    i = skipWs(text, keyEnd);
    if (text[i] !== ':') return out;
    i = skipWs(text, i + 1);
    if (i >= text.length) return out;
    const start = i;
    const isArgs = (key === 'arguments' || key === 'parameters') && out.argsStart === undefined;
    if (isArgs) out.argsStart = start;
    const end = valueEnd(text, start);
    if (end < 0) return out;
    if (isArgs) out.argsEnd = end;
    if (key === 'name') {
      const name = parsed(text.slice(start, end));
      if (typeof name === 'string') out.name = name;
    }
    i = skipWs(text, end);
    if (text[i] === '}') return { ...out, end: i + 1 };
    if (text[i] !== ',') return out;
    i = skipWs(text, i + 1);
  }
}

/** One `delta.tool_calls` entry of a streamed call. */
export interface CallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

/**
 * The call objects of an answer written in one of readToolCalls' forms, as far as the text has
 * come: each one's progress (offsets into `text`). The next object is looked for only once
 * the one before it is whole.
 */
function callObjects(text: string): CallProgress[] {
  let i = skipWs(text, 0);
  if (text.startsWith(MISTRAL_MARK, i)) i = skipWs(text, i + MISTRAL_MARK.length);
  if (text[i] === '{') return [callProgress(text, i)];
  const calls: CallProgress[] = [];
  const hermes = text.startsWith(HERMES_OPEN, i);
  if (!hermes && text[i] !== '[') return calls;
  if (!hermes) i = skipWs(text, i + 1);
  for (;;) {
    if (hermes) {
      if (!text.startsWith(HERMES_OPEN, i)) return calls;
      i = skipWs(text, i + HERMES_OPEN.length);
    }
    if (text[i] !== '{') return calls;
    const p = callProgress(text, i);
    calls.push(p);
    if (p.end === undefined) return calls;
    i = skipWs(text, p.end);
    if (hermes) {
      if (!text.startsWith(HERMES_CLOSE, i)) return calls;
      i = skipWs(text, i + HERMES_CLOSE.length);
    } else {
      if (text[i] !== ',') return calls;
      i = skipWs(text, i + 1);
    }
  }
}

/**
 * Calls sent as they are generated. The answer is read in readToolCalls' forms (one call
 * object, an array of them, `<tool_call>` blocks); call k's first delta, once its name is
 * whole (and names an offered tool) and its arguments (an object) have begun, carries its index k, id,
 * type and name; later deltas carry its arguments' text as it arrives, so that joined they
 * are the arguments' JSON as written. Call k starts only once call k - 1 is whole.
 */
export class CallStreamer {
  private text = '';
  /** Per call started: its id and how far into the text its arguments have been sent. */
  private readonly calls: { id: string; sent: number }[] = [];

  /** `names`: the tools a call may name. */
  constructor(private readonly names: ReadonlySet<string>) {}

  /** Whether a first delta has gone out (the answer is being sent as calls). */
  get started(): boolean {
    return this.calls.length > 0;
  }

  /** The deltas (`delta.tool_calls` entries) that `piece` makes ready; none while they wait for more. */
  push(piece: string): CallDelta[] {
    this.text += piece;
    const out: CallDelta[] = [];
    const objects = callObjects(this.text);
    for (let k = 0; k < objects.length; k++) {
      const p = objects[k] as CallProgress;
      // as readToolCalls takes them: an offered tool's name, arguments an object
      if (p.name === undefined || p.argsStart === undefined || !this.names.has(p.name)) break;
      if (this.text[p.argsStart] !== '{') break;
      let call = this.calls[k];
      if (call === undefined) {
        call = { id: `call_${randomBytes(12).toString('hex')}`, sent: p.argsStart };
        this.calls.push(call);
        out.push({ index: k, id: call.id, type: 'function', function: { name: p.name, arguments: '' } });
      }
      const upTo = p.argsEnd ?? this.text.length;
      if (upTo > call.sent) {
        out.push({ index: k, function: { arguments: this.text.slice(call.sent, upTo) } });
        call.sent = upTo;
      }
    }
    return out;
  }
}

/** Whether an answer that begins so may still turn out to be calls (readToolCalls' forms). */
export function mayBeCalls(text: string): boolean {
  const t = text.trimStart();
  return (
    t === '' ||
    t.startsWith('{') ||
    t.startsWith('[') ||
    t.startsWith(HERMES_OPEN) ||
    HERMES_OPEN.startsWith(t)
  );
}

/**
 * An assistant message's `tool_calls` (OpenAI's: arguments as JSON text) as chat templates read
 * them (arguments an object); undefined when absent.
 */
export function historyCalls(calls: unknown, param: string): ChatMessage['tool_calls'] {
  if (calls === undefined || calls === null) return undefined;
  if (!Array.isArray(calls)) throw badRequest(param, `'${param}' must be an array of tool calls`);
  return calls.map((c: unknown, j) => {
    const f = isBody(c) ? c.function : undefined;
    if (!isBody(f) || typeof f.name !== 'string' || typeof f.arguments !== 'string')
      throw badRequest(
        `${param}[${j}]`,
        `'${param}[${j}]' must be {"type": "function", "function": {"name", "arguments": "<JSON text>"}}`,
      );
    const args = parsed(f.arguments);
    if (!isBody(args))
      throw badRequest(
        `${param}[${j}].function.arguments`,
        `'${param}[${j}].function.arguments' must be the JSON text of an object`,
      );
    return { type: 'function' as const, function: { name: f.name, arguments: args } };
  });
}

/**
 * For a template that does not read `tool_calls`: each assistant turn's calls written into its
 * content as the model writes a call (one JSON object a line, after any text).
 */
export function callsAsText(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((m) => {
    if (m.tool_calls === undefined) return m;
    const calls = m.tool_calls.map((c) =>
      JSON.stringify({ name: c.function.name, arguments: c.function.arguments }),
    );
    const { tool_calls: _, ...rest } = m;
    return { ...rest, content: [m.content, ...calls].filter((x) => x !== '').join('\n') };
  });
}
