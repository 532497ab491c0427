// Tokenizes text files on this machine with the vocabulary make-model writes for the trained
// shape, into a u16 token file for train.py. Nothing is downloaded: the default corpus is the
// Markdown shipped in node_modules and Debian's license texts.
//   npx tsx bench/trained/corpus.ts OUT.tokens [FILE_OR_DIR ...]
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { planFor } from '../../src/engine/format/make-model.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../../src/engine/tokenizer/index.js';
import { TRAINED_SHAPE } from './shape.js';

const [out, ...given] = process.argv.slice(2);
if (out === undefined) {
  console.error('usage: npx tsx bench/trained/corpus.ts OUT.tokens [FILE_OR_DIR ...]');
  process.exit(64);
}
const roots = given.length ? given : ['node_modules', '/usr/share/common-licenses'];

function* textFiles(path: string): Generator<string> {
  const st = statSync(path);
  if (st.isFile()) {
    yield path;
    return;
  }
  if (!st.isDirectory()) return;
  for (const name of readdirSync(path).sort()) {
    const p = join(path, name);
    const s = statSync(p, { throwIfNoEntry: false });
    if (s?.isDirectory()) yield* textFiles(p);
    else if (
      s?.isFile() &&
      s.size >= 2048 &&
      (given.length || /\.md$/i.test(name) || path.endsWith('common-licenses'))
    )
      yield p;
  }
}

const plan = planFor({ arch: 'llama', shape: TRAINED_SHAPE, type: 'f32' });
const tok = new Tokenizer(tokenizerMetadataFromGguf(plan.metadata));
const ids: number[] = [];
let files = 0;
let bytes = 0;
for (const root of roots) {
  for (const f of textFiles(root)) {
    const text = readFileSync(f, 'utf8');
    ids.push(plan.vocab.bos);
    for (const id of tok.encode(text)) ids.push(id);
    files++;
    bytes += text.length;
  }
}
const u16 = Uint16Array.from(ids);
writeFileSync(out, u16);
console.log(
  `${files} files, ${bytes} characters -> ${u16.length} tokens (vocabulary ${TRAINED_SHAPE.vocab}) in ${out}`,
);
