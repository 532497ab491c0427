import { TandemError } from '../../errors/index.js';

/*
 * A JSON Schema turned into the shapes the JSON grammar generates. Every value the grammar
 * accepts is valid under the schema it came from: a keyword whose rule the grammar cannot
 * enforce is refused (a typed error naming it), never ignored. Annotations (title,
 * description, default, examples) are ignored, as they constrain nothing.
 */

/** A JSON value the grammar accepts: what `compileJsonSchema` returns. */
export type JsonNode =
  | { readonly kind: 'object'; readonly object: ObjectShape }
  | { readonly kind: 'array'; readonly items: JsonNode; readonly minItems: number; readonly maxItems: number }
  | { readonly kind: 'string'; readonly minLength: number; readonly maxLength: number }
  | { readonly kind: 'number'; readonly integer: boolean }
  /** One of these exact JSON texts (enum, const, true/false, null), as UTF-8 bytes. */
  | { readonly kind: 'literal'; readonly texts: readonly Uint8Array[] }
  | { readonly kind: 'anyOf'; readonly options: readonly JsonNode[] };

/**
 * An object's members. With `properties`, only those keys are generated, in the schema's
 * order, each optional one possibly skipped; with `values` (no properties), any keys, each
 * value of that shape.
 */
export type ObjectShape = { readonly properties: readonly ObjectProperty[] } | { readonly values: JsonNode };

export interface ObjectProperty {
  /** The key as it appears between the quotes (JSON-escaped), as UTF-8 bytes. */
  readonly key: Uint8Array;
  readonly value: JsonNode;
  readonly required: boolean;
}

/** Nesting a free JSON value ("any", or json_object mode) may reach; deeper, only scalars. */
export const ANY_DEPTH = 16;

const encoder = new TextEncoder();
const SCALARS: JsonNode[] = [
  { kind: 'string', minLength: 0, maxLength: Infinity },
  { kind: 'number', integer: false },
  { kind: 'literal', texts: ['true', 'false', 'null'].map((t) => encoder.encode(t)) },
];

/** Any JSON value nested at most `depth` more levels. */
export function anyJson(depth = ANY_DEPTH): JsonNode {
  if (depth <= 0) return { kind: 'anyOf', options: SCALARS };
  const inner = anyJson(depth - 1);
  return {
    kind: 'anyOf',
    options: [
      { kind: 'object', object: { values: inner } },
      { kind: 'array', items: inner, minItems: 0, maxItems: Infinity },
      ...SCALARS,
    ],
  };
}

/** OpenAI's json_object mode: any JSON object. */
export function anyJsonObject(): JsonNode {
  return { kind: 'object', object: { values: anyJson(ANY_DEPTH - 1) } };
}

const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  '$schema',
  '$id',
  '$comment',
  '$defs',
  'definitions',
  'deprecated',
  'readOnly',
  'writeOnly',
]);
const KNOWN: Record<string, readonly string[]> = {
  object: ['properties', 'required', 'additionalProperties'],
  array: ['items', 'minItems', 'maxItems'],
  string: ['minLength', 'maxLength'],
  number: [],
  integer: [],
  boolean: [],
  null: [],
};

function schemaError(path: string, message: string, hint: string): TandemError {
  return new TandemError('JSON_SCHEMA_UNSUPPORTED', `${path}: ${message}`, {
    hint,
    details: { path },
  });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Compiles a JSON Schema (the subset OpenAI's structured outputs use: type, properties,
 * required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum,
 * const, anyOf, $ref into $defs/definitions). Throws JSON_SCHEMA_UNSUPPORTED naming the
 * path of the first keyword it cannot enforce.
 */
export function compileJsonSchema(schema: unknown): JsonNode {
  const refs = new Map<string, JsonNode>();
  const compile = (s: unknown, path: string): JsonNode => {
    if (s === true || (isObject(s) && Object.keys(s).every((k) => ANNOTATIONS.has(k)))) return anyJson();
    if (!isObject(s))
      throw schemaError(
        path,
        `a schema must be an object, got ${JSON.stringify(s)}`,
        'pass a JSON Schema object',
      );
    if (typeof s.$ref === 'string') return ref(s.$ref, path);
    if ('enum' in s || 'const' in s) return literal(s, path);
    if (Array.isArray(s.anyOf)) {
      rejectOthers(s, ['anyOf'], path);
      return { kind: 'anyOf', options: s.anyOf.map((o, i) => compile(o, `${path}.anyOf[${i}]`)) };
    }
    const type = s.type;
    if (Array.isArray(type)) {
      rejectOthers(s, ['type', ...type.flatMap((t) => KNOWN[t as string] ?? [])], path);
      // each type keeps only its own keywords: {"type": ["string", "null"], "maxLength": 8}
      const only = (t: unknown): Record<string, unknown> =>
        Object.fromEntries(Object.entries(s).filter(([k]) => (KNOWN[t as string] ?? []).includes(k)));
      return { kind: 'anyOf', options: type.map((t) => compile({ ...only(t), type: t }, path)) };
    }
    if (typeof type !== 'string' || KNOWN[type] === undefined)
      throw schemaError(
        path,
        type === undefined
          ? 'a schema needs a "type" (or enum, const, anyOf, $ref)'
          : `unknown type ${JSON.stringify(type)}`,
        'use one of object, array, string, number, integer, boolean, null',
      );
    rejectOthers(s, ['type', ...(KNOWN[type] as readonly string[])], path);
    switch (type) {
      case 'object':
        return { kind: 'object', object: objectShape(s, path) };
      case 'array': {
        const minItems = count(s, 'minItems', 0, path);
        const maxItems = count(s, 'maxItems', Infinity, path);
        if (minItems > maxItems)
          throw schemaError(path, `minItems ${minItems} > maxItems ${maxItems}`, 'no array fits');
        const items = s.items === undefined ? anyJson() : compile(s.items, `${path}.items`);
        return { kind: 'array', items, minItems, maxItems };
      }
      case 'string': {
        const minLength = count(s, 'minLength', 0, path);
        const maxLength = count(s, 'maxLength', Infinity, path);
        if (minLength > maxLength)
          throw schemaError(path, `minLength ${minLength} > maxLength ${maxLength}`, 'no string fits');
        return { kind: 'string', minLength, maxLength };
      }
      case 'number':
      case 'integer':
        return { kind: 'number', integer: type === 'integer' };
      case 'boolean':
        return { kind: 'literal', texts: ['true', 'false'].map((t) => encoder.encode(t)) };
      default:
        return { kind: 'literal', texts: [encoder.encode('null')] };
    }
  };

  const objectShape = (s: Record<string, unknown>, path: string): ObjectShape => {
    const extra = s.additionalProperties;
    if (s.properties === undefined) {
      if (s.required !== undefined && !(Array.isArray(s.required) && s.required.length === 0))
        throw schemaError(
          path,
          '"required" without "properties"',
          'list the required keys under "properties"',
        );
      if (extra === false) return { properties: [] };
      return {
        values:
          extra === undefined || extra === true ? anyJson() : compile(extra, `${path}.additionalProperties`),
      };
    }
    if (!isObject(s.properties))
      throw schemaError(path, '"properties" must be an object', 'map each key to its schema');
    const required = s.required ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== 'string'))
      throw schemaError(path, '"required" must be an array of key names', 'list the keys as strings');
    for (const r of required as string[])
      if (!(r in s.properties))
        throw schemaError(
          path,
          `required key ${JSON.stringify(r)} is not in "properties"`,
          'give it a schema under "properties"',
        );
    // additionalProperties true or a schema still validates objects with only the listed keys
    return {
      properties: Object.entries(s.properties).map(([name, sub]) => ({
        key: encoder.encode(JSON.stringify(name).slice(1, -1)),
        value: compile(sub, `${path}.properties.${name}`),
        required: (required as string[]).includes(name),
      })),
    };
  };

  const literal = (s: Record<string, unknown>, path: string): JsonNode => {
    rejectOthers(s, ['enum', 'const', 'type'], path);
    const values = 'const' in s ? [s.const] : s.enum;
    if (!Array.isArray(values) || values.length === 0)
      throw schemaError(path, '"enum" must be a non-empty array', 'list the allowed values');
    if ('const' in s && 'enum' in s) throw schemaError(path, 'both "enum" and "const"', 'keep one of them');
    const typed = values.filter((v) => s.type === undefined || jsonType(v, s.type));
    if (typed.length === 0)
      throw schemaError(path, `no "enum" value is of type ${JSON.stringify(s.type)}`, 'no value fits');
    const texts = typed.map((v) => JSON.stringify(v));
    return { kind: 'literal', texts: [...new Set(texts)].map((t) => encoder.encode(t)) };
  };

  const ref = (target: string, path: string): JsonNode => {
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(target);
    if (!m)
      throw schemaError(
        path,
        `$ref ${JSON.stringify(target)} is not supported`,
        'refer to "#/$defs/NAME" or "#/definitions/NAME"',
      );
    const known = refs.get(target);
    if (known) return known;
    const defs = isObject(schema) ? schema[m[1] as string] : undefined;
    const def = isObject(defs)
      ? defs[(m[2] as string).replaceAll('~1', '/').replaceAll('~0', '~')]
      : undefined;
    if (def === undefined)
      throw schemaError(path, `$ref ${JSON.stringify(target)} names no definition`, 'define it under $defs');
    // a recursive definition refers to the node being built: fill one object in place
    const node = { kind: 'anyOf', options: [] as JsonNode[] } as { kind: 'anyOf'; options: JsonNode[] };
    refs.set(target, node);
    node.options.push(compile(def, `${path}.$ref(${target})`));
    return node;
  };

  return compile(schema, 'schema');
}

function count(s: Record<string, unknown>, name: string, fallback: number, path: string): number {
  const v = s[name];
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw schemaError(path, `"${name}" must be an integer >= 0, got ${JSON.stringify(v)}`, `fix "${name}"`);
  return v;
}

/** Whether a JSON value is of a schema "type" (a name or a list of names). */
function jsonType(v: unknown, type: unknown): boolean {
  if (Array.isArray(type)) return type.some((t) => jsonType(v, t));
  switch (type) {
    case 'null':
      return v === null;
    case 'boolean':
      return typeof v === 'boolean';
    case 'integer':
      return Number.isInteger(v);
    case 'number':
      return typeof v === 'number';
    case 'string':
      return typeof v === 'string';
    case 'array':
      return Array.isArray(v);
    case 'object':
      return isObject(v);
    default:
      return false;
  }
}

function rejectOthers(s: Record<string, unknown>, allowed: readonly string[], path: string): void {
  for (const key of Object.keys(s)) {
    if (ANNOTATIONS.has(key) || allowed.includes(key)) continue;
    throw schemaError(
      path,
      `the keyword "${key}" is not supported`,
      'responses are constrained by type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf and $ref; drop the others or check the output yourself',
    );
  }
}
