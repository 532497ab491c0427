import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { Tokenizer } from '../tokenizer/index.js';
import { TokenType } from '../tokenizer/metadata.js';
import { canEnd, initialState, MAX_INDENT, stepAll } from './json-grammar.js';
import { anyJsonObject, compileJsonSchema, type JsonNode } from './json-schema.js';
import { Rng } from './rng.js';
import { Sampler } from './sampler.js';
import { JsonConstraint } from './token-constraint.js';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
/** Whether `text` is a whole value of `node`. */
const whole = (node: JsonNode, text: string): boolean => canEnd(stepAll(initialState(node), bytes(text)));
/** Whether `text` can still grow into a value of `node`. */
const prefix = (node: JsonNode, text: string): boolean => stepAll(initialState(node), bytes(text)).length > 0;

/** The longest prefix of `text` that can still grow into a value of `node`. */
function longestPrefix(node: JsonNode, text: string): string {
  let state = initialState(node);
  let n = 0;
  for (const c of text) {
    state = stepAll(state, bytes(c));
    if (state.length === 0) break;
    n += c.length;
  }
  return text.slice(0, n);
}

const person = {
  type: 'object',
  title: 'Person',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 4 },
    age: { type: 'integer' },
    tags: { type: 'array', items: { enum: ['a', 'b', 7, null] }, minItems: 1, maxItems: 2 },
    ok: { type: ['boolean', 'null'] },
  },
  required: ['name', 'age'],
  additionalProperties: false,
};

/**
 * A SentencePiece vocabulary with every byte and pieces that share prefixes (`"`, `",`,
 * `"}`, `tr`, `true`...), so that a token can end a string and start what follows it.
 */
function testTokenizer(): Tokenizer {
  const pieces = [
    '{',
    '}',
    '"',
    '{"',
    '":',
    '",',
    '"}',
    '▁"',
    '▁{',
    'tr',
    'ue',
    'true',
    'null',
    'nu',
    '12',
    '3',
    '-',
    '.5',
    'e9',
  ];
  pieces.push(
    'name',
    'na',
    'me',
    'age',
    'tags',
    'ok',
    '▁',
    '▁▁',
    '[',
    ']',
    '],',
    '["',
    '"]',
    'é',
    'ab',
    'a"',
    '\\',
    '\\u',
    '00e9',
  );
  const tokens = [
    '<unk>',
    '<s>',
    '</s>',
    ...Array.from({ length: 256 }, (_, i) => `<0x${i.toString(16).toUpperCase().padStart(2, '0')}>`),
    ...pieces,
  ];
  const types = tokens.map((_, i) =>
    i === 0 ? TokenType.unknown : i < 3 ? TokenType.control : i < 259 ? TokenType.byte : TokenType.normal,
  );
  return new Tokenizer({
    model: 'llama',
    tokens,
    scores: tokens.map(() => 0),
    tokenTypes: types,
    bosTokenId: 1,
    eosTokenId: 2,
    unknownTokenId: 0,
  });
}

/** A small validator of the schema subset, independent of the grammar. */
function valid(v: unknown, s: Record<string, unknown>): boolean {
  if ('enum' in s) return (s.enum as unknown[]).some((e) => JSON.stringify(e) === JSON.stringify(v));
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  return types.some((t) => {
    switch (t) {
      case 'object': {
        if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
        const props = s.properties as Record<string, Record<string, unknown>>;
        const o = v as Record<string, unknown>;
        return (
          Object.keys(o).every((k) => k in props && valid(o[k], props[k] as Record<string, unknown>)) &&
          ((s.required as string[]) ?? []).every((k) => k in o)
        );
      }
      case 'array':
        return (
          Array.isArray(v) &&
          v.length >= ((s.minItems as number) ?? 0) &&
          v.length <= ((s.maxItems as number) ?? Infinity) &&
          v.every((x) => valid(x, s.items as Record<string, unknown>))
        );
      case 'string':
        return (
          typeof v === 'string' &&
          [...v].length >= ((s.minLength as number) ?? 0) &&
          [...v].length <= ((s.maxLength as number) ?? Infinity)
        );
      case 'integer':
        return Number.isInteger(v);
      case 'boolean':
        return typeof v === 'boolean';
      case 'null':
        return v === null;
      default:
        return false;
    }
  });
}

describe('JSON grammar', () => {
  const node = compileJsonSchema(person);

  it('accepts what the schema allows, keys in its order, optional ones skipped', () => {
    for (const text of [
      '{"name":"Al","age":3}',
      '{ "name" : "Al" , "age" : -12 , "ok" : null }',
      '{\n  "name": "Al",\n  "age": 1\n}',
      '{"name":"\\u00e9\\n","age":0,"tags":["a",7],"ok":true}',
      '{"name":"éé","age":10,"tags":[null]}',
      '\n{"name":"a","age":1}',
    ])
      assert.ok(whole(node, text), text);
  });

  it('refuses what the schema does not allow, at the first byte that breaks it', () => {
    const cases: [string, string][] = [
      ['{"age":1,"name":"a"}', '{"'], // out of order: name comes first
      ['{"name":"a"}', '{"name":"a"'], // a required key missing: no }
      ['{"name":"a","age":1,"x":1}', '{"name":"a","age":1,"'], // no more keys (additionalProperties false)
      ['{"name":"","age":1}', '{"name":"'], // minLength 1
      ['{"name":"abcde","age":1}', '{"name":"abcd'], // maxLength 4
      ['{"name":"a","age":1.5}', '{"name":"a","age":1'], // integer
      ['{"name":"a","age":01}', '{"name":"a","age":0'], // no leading zero
      ['{"name":"a","age":1,"tags":[]}', '{"name":"a","age":1,"tags":['], // minItems 1
      ['{"name":"a","age":1,"tags":["a","b","a"]}', '{"name":"a","age":1,"tags":["a","b"'], // maxItems 2
      ['{"name":"a","age":1,"tags":["c"]}', '{"name":"a","age":1,"tags":["'], // enum
      ['{"name":"a\u0001","age":1}', '{"name":"a'], // a control character in a string
      ['{"name":"\\x","age":1}', '{"name":"\\'], // an unknown escape
    ];
    for (const [text, longest] of cases) assert.equal(longestPrefix(node, text), longest, text);
    // invalid UTF-8 in a string: a lone continuation byte, an overlong form, a surrogate
    for (const seq of [[0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80]]) {
      const s = stepAll(initialState(node), Uint8Array.from([...bytes('{"name":"'), ...seq]));
      assert.equal(s.length, 0, seq.join(','));
    }
  });

  it('ends a number only where a number can end, and bounds whitespace', () => {
    const n = compileJsonSchema({ type: 'number' });
    assert.ok(whole(n, '-0.5e+9'));
    assert.ok(!whole(n, '-') && prefix(n, '-'));
    assert.ok(!whole(n, '1e') && prefix(n, '1e'));
    assert.ok(!prefix(n, '1..'));
    assert.ok(whole(n, '\n' + ' '.repeat(MAX_INDENT) + '1') && whole(n, ' 1') && whole(n, '\n\t 1'));
    assert.ok(
      !prefix(n, '\n' + ' '.repeat(MAX_INDENT + 1)) &&
        !prefix(n, '  ') &&
        !prefix(n, '\t') &&
        !prefix(n, ' \n'),
    );
  });

  it('anyOf, const, and recursive definitions', () => {
    const tree = compileJsonSchema({
      $defs: {
        t: {
          type: 'object',
          properties: { v: { const: 'x' }, kids: { type: 'array', items: { $ref: '#/$defs/t' } } },
          required: ['v'],
        },
      },
      $ref: '#/$defs/t',
    });
    assert.ok(whole(tree, '{"v":"x","kids":[{"v":"x"},{"v":"x","kids":[]}]}'));
    assert.ok(!prefix(tree, '{"v":"y'));
    const either = compileJsonSchema({ anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 1 }] });
    assert.ok(whole(either, '12') && whole(either, '"a"') && !prefix(either, '"ab') && !prefix(either, '1.'));
    const free = anyJsonObject();
    assert.ok(whole(free, '{"a":[1,{"b":null},"c",true],"d":{}}'));
    assert.ok(!prefix(free, '[') && !prefix(free, '{"a":}'));
  });

  it('refuses the keywords it cannot enforce, naming where they are', () => {
    const error = (schema: unknown): string => {
      try {
        compileJsonSchema(schema);
      } catch (e) {
        if (isTandemError(e) && e.code === 'JSON_SCHEMA_UNSUPPORTED') return e.message;
        throw e;
      }
      return 'compiled';
    };
    assert.match(
      error({ type: 'object', properties: { d: { type: 'string', format: 'date' } } }),
      /schema\.properties\.d: .*"format"/,
    );
    assert.match(error({ type: 'number', minimum: 0 }), /"minimum" is not supported/);
    assert.match(error({ type: 'thing' }), /unknown type/);
    assert.match(error({ $ref: 'http://x/y' }), /\$ref/);
    assert.match(error({ type: 'object', properties: {}, required: ['a'] }), /required key "a"/);
    assert.match(error({ type: 'string', enum: [1, 2] }), /no "enum" value is of type/);
    assert.equal(error({ type: 'string', description: 'annotations are fine', default: 'x' }), 'compiled');
  });
});

describe('JsonConstraint', () => {
  const tokenizer = testTokenizer();
  const eos = new Set([2]);
  const schemas: [string, JsonNode][] = [
    ['person', compileJsonSchema(person)],
    ['any object', anyJsonObject()],
    ['string', compileJsonSchema({ type: 'string' })],
  ];

  it('masks exactly the tokens that allows() accepts, along random walks', () => {
    const rng = new Rng(11);
    for (const [name, node] of schemas) {
      for (let walk = 0; walk < 6; walk++) {
        const c = new JsonConstraint(tokenizer, node, eos);
        for (let step = 0; step < 40; step++) {
          const logits = new Float32Array(tokenizer.vocabSize);
          c.mask(logits);
          const masked: number[] = [];
          const brute: number[] = [];
          for (let id = 0; id < tokenizer.vocabSize; id++) {
            if (logits[id] === 0) masked.push(id);
            if (c.allows(id)) brute.push(id);
          }
          assert.deepEqual(masked, brute, `${name}, walk ${walk}, step ${step}`);
          const next = brute[Math.floor(rng.next() * brute.length)] as number;
          if (next === 2) break;
          c.accept(next);
        }
      }
    }
  });

  it('a sampler under it writes valid JSON, ended by EOS, at any temperature', () => {
    const rng = new Rng(5);
    const node = compileJsonSchema(person);
    for (const [temperature, topP] of [
      [0, 1],
      [1, 1],
      [1.5, 0.9],
    ] as const) {
      for (let run = 0; run < 8; run++) {
        const c = new JsonConstraint(tokenizer, node, eos);
        const sampler = new Sampler({ temperature, topP, topK: 0, minP: 0, seed: run, constraint: c });
        const ids: number[] = [];
        for (let i = 0; i < 400; i++) {
          const logits = Float32Array.from({ length: tokenizer.vocabSize }, () => rng.next() * 6);
          const before = Float32Array.from(logits);
          const id = sampler.sample(logits);
          assert.deepEqual(logits, before, 'the caller keeps its logits');
          if (id === 2) break;
          ids.push(id);
        }
        const text = tokenizer.decode(ids, { stripLeadingSpace: false });
        // the schema bounds every part, so the value ends well within 400 tokens
        assert.ok(c.complete, `T=${temperature} run ${run}: ${text}`);
        assert.ok(valid(JSON.parse(text), person), text);
      }
    }
  });

  it('greedy under it picks the most likely allowed token', () => {
    const rng = new Rng(9);
    const c = new JsonConstraint(tokenizer, anyJsonObject(), eos);
    const s = new Sampler({ temperature: 0, constraint: c });
    assert.equal(s.greedy, false, 'a cluster must not answer the argmax alone');
    for (let i = 0; i < 30; i++) {
      const logits = Float32Array.from({ length: tokenizer.vocabSize }, () => rng.next());
      let best = -1;
      for (let id = 0; id < logits.length; id++)
        if (c.allows(id) && (best < 0 || (logits[id] as number) > (logits[best] as number))) best = id;
      assert.equal(s.sample(logits), best);
      if (best === 2) break;
    }
  });
});
