import type { JsonNode, ObjectProperty } from './json-schema.js';

/*
 * A byte-level recognizer of JSON text shaped by a JsonNode. A state is a set of parse
 * stacks (more than one only where anyOf or an enum leaves the choice open); a stack is a
 * persistent linked list of frames, so stepping one byte copies at most the top frame and
 * states along a token trie share their tails. Frames store what follows the child they
 * wait on: finishing a value is popping it.
 *
 * Where JSON allows whitespace, a run is one space, or a newline and at most MAX_INDENT spaces
 * or tabs (what compact and indented JSON both need), so that a model cannot fill its token
 * budget with blanks. Numbers are at most MAX_NUMBER bytes.
 */

export const MAX_INDENT = 20;
export const MAX_NUMBER = 32;

const enum F {
  /** A value of `node` comes next. */
  Value,
  /** Inside an object: `phase` says what comes next. */
  Object,
  /** Inside an array. */
  Array,
  /** Inside a string (after its opening quote). */
  String,
  /** Inside an object key that must be one of `candidates` (after its opening quote). */
  Key,
  /** Inside a number. */
  Number,
  /** Partway through one of several exact texts. */
  Literal,
}

const enum ObjPhase {
  /** After `{`: a key or `}`. */
  Open,
  /** After `,`: a key. */
  Comma,
  /** After a key: `:`. */
  Colon,
  /** After a member's value: `,` or `}`. */
  Member,
}

const enum Num {
  Minus,
  Zero,
  Int,
  Dot,
  Frac,
  Exp,
  ExpSign,
  ExpDigits,
}

type Frame =
  | { readonly t: F.Value; readonly node: JsonNode; readonly ws: number }
  | {
      readonly t: F.Object;
      readonly node: JsonNode & { kind: 'object' };
      readonly phase: ObjPhase;
      /** With properties: the index of the first key that may still come (keys go in order). */
      readonly next: number;
      /** The value's shape once the key is read (Colon phase). */
      readonly value: JsonNode | undefined;
      readonly ws: number;
    }
  | {
      readonly t: F.Array;
      readonly node: JsonNode & { kind: 'array' };
      /** 0: after `[`; 1: after `,`; 2: after an item. */
      readonly phase: 0 | 1 | 2;
      readonly items: number;
      readonly ws: number;
    }
  | {
      readonly t: F.String;
      readonly minLength: number;
      readonly maxLength: number;
      /** Characters so far (a UTF-8 sequence or an escape is one). */
      readonly length: number;
      /** 0 plain; 1 after a backslash; e in 2..5 after \u: e - 1 hex digits still to come. */
      readonly escape: number;
      /** UTF-8 continuation bytes the current character still needs; the next one is in lo..hi. */
      readonly more: number;
      readonly lo: number;
      readonly hi: number;
    }
  | {
      readonly t: F.Key;
      readonly candidates: readonly number[];
      readonly properties: readonly ObjectProperty[];
      readonly at: number;
    }
  | { readonly t: F.Number; readonly integer: boolean; readonly phase: Num; readonly length: number }
  | { readonly t: F.Literal; readonly texts: readonly Uint8Array[]; readonly at: number };

/** A parse stack; `up` is the frame below. The bottom (`up === null`) is DONE. */
export interface Stack {
  readonly frame: Frame | null;
  readonly up: Stack | null;
}

/** The stack of a finished top-level value: only the end of the generation may follow. */
const DONE: Stack = { frame: null, up: null };

export type JsonState = readonly Stack[];

export function initialState(node: JsonNode): JsonState {
  return [{ frame: { t: F.Value, node, ws: 0 }, up: DONE }];
}

/** Whether the text so far is a whole value (the generation may end here). */
export function canEnd(state: JsonState): boolean {
  for (const s of state) {
    if (s === DONE) return true;
    const f = s.frame;
    if (s.up !== DONE || f === null) continue;
    if (f.t === F.Number && numberEnds(f.phase)) return true;
    if (f.t === F.Literal && f.texts.some((t) => t.length === f.at)) return true;
  }
  return false;
}

/**
 * Whether the state is one stack inside a string's plain text, where every printable ASCII
 * byte but `"` and `\` steps it alike.
 */
export function inText(state: JsonState): boolean {
  const f = state.length === 1 ? (state[0] as Stack).frame : null;
  return f !== null && f.t === F.String && f.escape === 0 && f.more === 0;
}

/** The state after one more byte; empty when the byte cannot come next. */
export function step(state: JsonState, byte: number): JsonState {
  scratch.length = 0;
  for (const s of state) feed(s, byte, scratch);
  // most bytes of a string's text leave its stack as it was: the same state, nothing copied
  if (scratch.length === 1 && state.length === 1 && scratch[0] === state[0]) return state;
  return scratch.slice();
}

/** step's output before it is copied (feed never calls step, so one array serves). */
const scratch: Stack[] = [];

/** The state after `bytes`, or empty at the first byte that cannot come. */
export function stepAll(state: JsonState, bytes: Uint8Array): JsonState {
  let s = state;
  for (let i = 0; i < bytes.length && s.length > 0; i++) s = step(s, bytes[i] as number);
  return s;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const MINUS = 0x2d;

function isWs(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

/** A frame's `ws` after blank byte `b`, or undefined where the run may not grow: 0 none yet, 1 one space, 2 + n a newline and n spaces or tabs. */
function blank(ws: number, b: number): number | undefined {
  if (ws === 0) return b === 0x20 ? 1 : b === 0x0a ? 2 : undefined;
  if (ws >= 2 && ws < 2 + MAX_INDENT && (b === 0x20 || b === 0x09)) return ws + 1;
  return undefined;
}
function isDigit(b: number): boolean {
  return b >= 0x30 && b <= 0x39;
}
function isHex(b: number): boolean {
  return isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
}
function numberEnds(phase: Num): boolean {
  return phase === Num.Zero || phase === Num.Int || phase === Num.Frac || phase === Num.ExpDigits;
}

function push(up: Stack, frame: Frame): Stack {
  return { frame, up };
}

/** `frame` in place of the top of `s`. */
function swap(s: Stack, frame: Frame): Stack {
  return { frame, up: s.up };
}

/** Appends to `out` the stacks `s` can become on `b`. */
function feed(s: Stack, b: number, out: Stack[]): void {
  const f = s.frame;
  if (f === null) return;
  switch (f.t) {
    case F.Value:
      if (isWs(b)) {
        const ws = blank(f.ws, b);
        if (ws !== undefined) out.push(swap(s, { ...f, ws }));
        return;
      }
      startValue(f.node, s.up as Stack, b, out);
      return;
    case F.Object:
      feedObject(s, f, b, out);
      return;
    case F.Array:
      feedArray(s, f, b, out);
      return;
    case F.String:
      feedString(s, f, b, out);
      return;
    case F.Key: {
      if (b === QUOTE) {
        const done = f.candidates.find((i) => (f.properties[i] as ObjectProperty).key.length === f.at);
        if (done === undefined) return;
        // the object below waits in its Colon phase for this key's value shape
        const obj = (s.up as Stack).frame as Frame & { t: F.Object };
        const prop = f.properties[done] as ObjectProperty;
        out.push(swap(s.up as Stack, { ...obj, next: done + 1, value: prop.value }));
        return;
      }
      const candidates = f.candidates.filter((i) => (f.properties[i] as ObjectProperty).key[f.at] === b);
      if (candidates.length > 0) out.push(swap(s, { ...f, candidates, at: f.at + 1 }));
      return;
    }
    case F.Number:
      feedNumber(s, f, b, out);
      return;
    case F.Literal: {
      const texts = f.texts.filter((t) => t[f.at] === b);
      if (texts.length > 0) out.push(swap(s, { ...f, texts, at: f.at + 1 }));
      // a whole text followed by what comes after the value
      if (f.texts.some((t) => t.length === f.at)) feed(s.up as Stack, b, out);
      return;
    }
  }
}

/** The first byte `b` of a value of `node`, with `up` below it. */
function startValue(node: JsonNode, up: Stack, b: number, out: Stack[]): void {
  switch (node.kind) {
    case 'anyOf':
      for (const o of node.options) startValue(o, up, b, out);
      return;
    case 'object':
      if (b === LBRACE)
        out.push(push(up, { t: F.Object, node, phase: ObjPhase.Open, next: 0, value: undefined, ws: 0 }));
      return;
    case 'array':
      if (b === LBRACKET) out.push(push(up, { t: F.Array, node, phase: 0, items: 0, ws: 0 }));
      return;
    case 'string':
      if (b === QUOTE)
        out.push(push(up, { ...freeString(), minLength: node.minLength, maxLength: node.maxLength }));
      return;
    case 'number':
      if (b === MINUS)
        out.push(push(up, { t: F.Number, integer: node.integer, phase: Num.Minus, length: 1 }));
      else if (isDigit(b))
        out.push(
          push(up, { t: F.Number, integer: node.integer, phase: b === 0x30 ? Num.Zero : Num.Int, length: 1 }),
        );
      return;
    case 'literal': {
      const texts = node.texts.filter((t) => t[0] === b);
      if (texts.length > 0) out.push(push(up, { t: F.Literal, texts, at: 1 }));
      return;
    }
  }
}

/** Keys that may come next: from `next` through the first required one (or to the end). */
function keyCandidates(props: readonly ObjectProperty[], next: number): number[] {
  const out: number[] = [];
  for (let i = next; i < props.length; i++) {
    out.push(i);
    if ((props[i] as ObjectProperty).required) break;
  }
  return out;
}

/** Whether no required key is left from `next` on (the object may close). */
function mayClose(props: readonly ObjectProperty[], next: number): boolean {
  for (let i = next; i < props.length; i++) if ((props[i] as ObjectProperty).required) return false;
  return true;
}

function feedObject(s: Stack, f: Frame & { t: F.Object }, b: number, out: Stack[]): void {
  if (isWs(b)) {
    const ws = blank(f.ws, b);
    if (ws !== undefined) out.push(swap(s, { ...f, ws }));
    return;
  }
  const shape = f.node.object;
  const props = 'properties' in shape ? shape.properties : undefined;
  const close = (): void => {
    if (props === undefined || mayClose(props, f.next)) out.push(s.up as Stack);
  };
  const key = (): void => {
    if (b !== QUOTE) return;
    const colon = swap(s, { ...f, phase: ObjPhase.Colon, ws: 0 });
    if (props === undefined) {
      const values = (shape as { values: JsonNode }).values;
      out.push(push(swap(s, { ...f, phase: ObjPhase.Colon, value: values, ws: 0 }), freeString()));
      return;
    }
    const candidates = keyCandidates(props, f.next);
    if (candidates.length > 0) out.push(push(colon, { t: F.Key, candidates, properties: props, at: 0 }));
  };
  switch (f.phase) {
    case ObjPhase.Open:
      if (b === RBRACE) close();
      else key();
      return;
    case ObjPhase.Comma:
      key();
      return;
    case ObjPhase.Colon:
      if (b === COLON && f.value !== undefined)
        out.push(
          push(swap(s, { ...f, phase: ObjPhase.Member, value: undefined, ws: 0 }), {
            t: F.Value,
            node: f.value,
            ws: 0,
          }),
        );
      return;
    case ObjPhase.Member:
      if (b === RBRACE) close();
      else if (b === COMMA && (props === undefined || f.next < props.length))
        out.push(swap(s, { ...f, phase: ObjPhase.Comma, ws: 0 }));
      return;
  }
}

function freeString(): Frame & { t: F.String } {
  return { t: F.String, minLength: 0, maxLength: Infinity, length: 0, escape: 0, more: 0, lo: 0, hi: 0 };
}

function feedArray(s: Stack, f: Frame & { t: F.Array }, b: number, out: Stack[]): void {
  if (isWs(b)) {
    const ws = blank(f.ws, b);
    if (ws !== undefined) out.push(swap(s, { ...f, ws }));
    return;
  }
  const { minItems, maxItems, items } = f.node;
  if (f.phase === 2) {
    if (b === RBRACKET && f.items >= minItems) out.push(s.up as Stack);
    else if (b === COMMA && f.items < maxItems) out.push(swap(s, { ...f, phase: 1, ws: 0 }));
    return;
  }
  if (b === RBRACKET && f.phase === 0 && minItems === 0) {
    out.push(s.up as Stack);
    return;
  }
  if (f.items >= maxItems) return;
  startValue(items, swap(s, { ...f, phase: 2, items: f.items + 1, ws: 0 }), b, out);
}

function feedString(s: Stack, f: Frame & { t: F.String }, b: number, out: Stack[]): void {
  if (f.escape === 1) {
    if (b === 0x75) out.push(swap(s, { ...f, escape: 5 }));
    else if (
      b === QUOTE ||
      b === BACKSLASH ||
      b === 0x2f ||
      b === 0x62 ||
      b === 0x66 ||
      b === 0x6e ||
      b === 0x72 ||
      b === 0x74
    )
      out.push(swap(s, { ...f, escape: 0 }));
    return;
  }
  if (f.escape > 1) {
    if (isHex(b)) out.push(swap(s, { ...f, escape: f.escape === 2 ? 0 : f.escape - 1 }));
    return;
  }
  if (f.more > 0) {
    // a continuation byte of the character already counted
    if (b >= f.lo && b <= f.hi) out.push(swap(s, { ...f, more: f.more - 1, lo: 0x80, hi: 0xbf }));
    return;
  }
  if (b === QUOTE) {
    if (f.length >= f.minLength) out.push(s.up as Stack);
    return;
  }
  if (b < 0x20 || f.length >= f.maxLength) return;
  if (b === BACKSLASH) {
    out.push(swap(s, { ...f, length: f.length + 1, escape: 1 }));
    return;
  }
  if (b < 0x80) {
    // with no length bound left to check, the count is not kept
    out.push(
      f.maxLength === Infinity && f.length >= f.minLength ? s : swap(s, { ...f, length: f.length + 1 }),
    );
    return;
  }
  // a UTF-8 lead byte: well-formed sequences only (no overlong forms, surrogates or code
  // points past U+10FFFF), so that the text decodes to exactly the characters counted
  const more = b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : 0;
  if (more === 0) return;
  const lo = b === 0xe0 ? 0xa0 : b === 0xf0 ? 0x90 : 0x80;
  const hi = b === 0xed ? 0x9f : b === 0xf4 ? 0x8f : 0xbf;
  out.push(swap(s, { ...f, length: f.length + 1, more, lo, hi }));
}

function feedNumber(s: Stack, f: Frame & { t: F.Number }, b: number, out: Stack[]): void {
  let phase: Num | undefined;
  if (isDigit(b)) {
    switch (f.phase) {
      case Num.Minus:
        phase = b === 0x30 ? Num.Zero : Num.Int;
        break;
      case Num.Int:
        phase = Num.Int;
        break;
      case Num.Dot:
      case Num.Frac:
        phase = Num.Frac;
        break;
      case Num.Exp:
      case Num.ExpSign:
      case Num.ExpDigits:
        phase = Num.ExpDigits;
        break;
      default:
        break;
    }
  } else if (b === 0x2e && !f.integer && (f.phase === Num.Zero || f.phase === Num.Int)) {
    phase = Num.Dot;
  } else if (
    (b === 0x65 || b === 0x45) &&
    !f.integer &&
    (f.phase === Num.Zero || f.phase === Num.Int || f.phase === Num.Frac)
  ) {
    phase = Num.Exp;
  } else if ((b === 0x2b || b === MINUS) && f.phase === Num.Exp) {
    phase = Num.ExpSign;
  }
  if (phase !== undefined) {
    if (f.length < MAX_NUMBER) out.push(swap(s, { ...f, phase, length: f.length + 1 }));
    return;
  }
  // the number ended before this byte, which belongs to what follows it
  if (numberEnds(f.phase)) feed(s.up as Stack, b, out);
}
