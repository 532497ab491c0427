import { TandemError } from '../../errors/index.js';
import type { Tokenizer } from '../tokenizer/index.js';
import { canEnd, inText, initialState, step, stepAll, type JsonState } from './json-grammar.js';
import type { JsonNode } from './json-schema.js';

/** Which tokens may come next in a generation; the Sampler draws only among them. */
export interface TokenConstraint {
  /** Whether `id` may come next. */
  allows(id: number): boolean;
  /** Sets the logit of every token that may not come next to -Infinity (in place). */
  mask(logits: Float32Array): void;
  /** Records that `id` came next; it must be one `allows` accepts. */
  accept(id: number): void;
}

/**
 * A vocabulary's tokens as bytes, sorted by their bytes, with each one's common prefix with
 * the one before: walking them in this order visits each shared prefix once, and a prefix
 * the grammar refuses rules out every token that starts with it.
 */
class VocabIndex {
  /** Token ids with at least one byte, in byte order. */
  readonly sorted: Int32Array;
  /** lcp[k]: bytes sorted[k] shares with sorted[k - 1] (0 for k = 0). */
  readonly lcp: Uint16Array;
  /** Each token's bytes by id (empty for control, unknown and unused tokens). */
  readonly bytes: readonly Uint8Array[];
  /** plain[k]: leading bytes of sorted[k] that are plain string text (printable ASCII but `"` and `\`). */
  readonly plain: Uint16Array;

  constructor(tokenizer: Tokenizer) {
    const bytes: Uint8Array[] = [];
    const ids: number[] = [];
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const b = tokenizer.tokenBytes(id);
      bytes.push(b);
      if (b.length > 0) ids.push(id);
    }
    ids.sort((a, b) => Buffer.compare(bytes[a] as Uint8Array, bytes[b] as Uint8Array) || a - b);
    this.sorted = Int32Array.from(ids);
    this.lcp = new Uint16Array(ids.length);
    for (let k = 1; k < ids.length; k++) {
      const a = bytes[ids[k - 1] as number] as Uint8Array;
      const b = bytes[ids[k] as number] as Uint8Array;
      let n = 0;
      while (n < a.length && n < b.length && a[n] === b[n] && n < 0xffff) n++;
      this.lcp[k] = n;
    }
    this.bytes = bytes;
    this.plain = new Uint16Array(ids.length);
    for (let k = 0; k < ids.length; k++) {
      const b = bytes[ids[k] as number] as Uint8Array;
      let n = 0;
      while (n < b.length && n < 0xffff && isPlain(b[n] as number)) n++;
      this.plain[k] = n;
    }
  }
}

/** A byte that is plain text in a string: inside one, each steps the state as any other does. */
function isPlain(b: number): boolean {
  return b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c;
}

const indexes = new WeakMap<Tokenizer, VocabIndex>();

function indexOf(tokenizer: Tokenizer): VocabIndex {
  let index = indexes.get(tokenizer);
  if (index === undefined) {
    index = new VocabIndex(tokenizer);
    indexes.set(tokenizer, index);
  }
  return index;
}

/**
 * Constrains a generation to JSON text of a shape (compileJsonSchema's output): every token
 * must extend the text towards a valid value, and one of `endTokens` may come only once the
 * value is whole. What a generation cut short by its token limit returns is a prefix of such
 * a value.
 */
export class JsonConstraint implements TokenConstraint {
  private state: JsonState;
  private readonly index: VocabIndex;
  private ended = false;

  constructor(
    tokenizer: Tokenizer,
    node: JsonNode,
    private readonly endTokens: ReadonlySet<number>,
  ) {
    this.index = indexOf(tokenizer);
    this.state = initialState(node);
  }

  /** Whether the text so far is a whole value. */
  get complete(): boolean {
    return canEnd(this.state);
  }

  allows(id: number): boolean {
    return this.after(id) !== undefined;
  }

  accept(id: number): void {
    const next = this.after(id);
    if (next === undefined)
      throw new TandemError('JSON_CONSTRAINT', `token ${id} does not continue the JSON value`, {
        hint: 'this is a bug: the sampler drew a token the constraint masked',
        details: { token: id },
      });
    if (next === 'end') this.ended = true;
    else this.state = next;
  }

  /** The state after token `id`; 'end' for an end token that may come now; undefined where `id` may not come. */
  private after(id: number): JsonState | 'end' | undefined {
    if (this.ended) return undefined;
    if (this.endTokens.has(id)) return canEnd(this.state) ? 'end' : undefined;
    const bytes = this.index.bytes[id];
    if (bytes === undefined || bytes.length === 0) return undefined;
    const next = stepAll(this.state, bytes);
    return next.length > 0 ? next : undefined;
  }

  mask(logits: Float32Array): void {
    const allowed = new Uint8Array(logits.length);
    let count = 0;
    if (!this.ended) {
      const { sorted, lcp, bytes, plain } = this.index;
      // inside a string every plain byte steps the state alike: the state after d plain bytes
      // is computed once, whichever token's prefix they are
      const text = inText(this.state);
      const plainLevels: JsonState[] = [this.state];
      const plainAt = (d: number): JsonState => {
        for (let i = plainLevels.length; i <= d; i++)
          plainLevels.push(step(plainLevels[i - 1] as JsonState, 0x61));
        return plainLevels[d] as JsonState;
      };
      // levels[d]: the state after the current path's first d bytes, for d <= valid
      const levels: JsonState[] = [this.state];
      let valid = 0;
      // a prefix this long of the previous token was refused: so is every token sharing it
      let dead = Infinity;
      for (let k = 0; k < sorted.length; k++) {
        const l = lcp[k] as number;
        if (l >= dead) continue;
        dead = Infinity;
        const id = sorted[k] as number;
        const b = bytes[id] as Uint8Array;
        if (valid > l) valid = l;
        if (text)
          while (valid < (plain[k] as number)) {
            const next = plainAt(valid + 1);
            if (next.length === 0) break;
            levels[++valid] = next;
          }
        while (valid < b.length) {
          const next = step(levels[valid] as JsonState, b[valid] as number);
          if (next.length === 0) break;
          levels[++valid] = next;
        }
        if (valid === b.length) {
          if (id < allowed.length) allowed[id] = 1;
          count++;
        } else {
          dead = valid + 1;
        }
      }
      if (canEnd(this.state))
        for (const id of this.endTokens)
          if (id < allowed.length) {
            allowed[id] = 1;
            count++;
          }
    }
    if (count === 0)
      throw new TandemError('JSON_CONSTRAINT', 'no token of the vocabulary continues the JSON value', {
        hint: 'the vocabulary cannot spell what the schema needs next; simplify the schema',
      });
    for (let i = 0; i < logits.length; i++) if (allowed[i] === 0) logits[i] = -Infinity;
  }
}
