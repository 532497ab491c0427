// The corpus of the shipped model: the King James Version of the Bible (public domain; the
// translation dates from 1611) as Debian's bible-kjv-text package ships it, read out with that
// package's `bible` program (bible-kjv, GPL-2+). Nothing is downloaded here: install both
// packages first (`apt-get install bible-kjv bible-kjv-text`). Writes two UTF-8 text files:
// every chapter but each twentieth to TRAIN, each twentieth chapter (the 20th, 40th, ...) to
// HELD_OUT, so the held-out text samples the whole book rather than its last pages.
// Each chapter is its heading line ("Genesis 1"), a blank line, then one verse per line
// without its number.
//   npx tsx bench/train-corpus.ts TRAIN.txt HELD_OUT.txt
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';

const [trainOut, heldOut] = process.argv.slice(2);
if (trainOut === undefined || heldOut === undefined) {
  console.error('usage: npx tsx bench/train-corpus.ts TRAIN.txt HELD_OUT.txt');
  process.exit(64);
}

const r = spawnSync('bible', ['-l', '100000', 'gen1:1-rev22:21'], {
  encoding: 'utf8',
  maxBuffer: 64 << 20,
  timeout: 60_000,
});
if (r.error || r.status !== 0) {
  console.error(
    `bible failed (${r.error?.message ?? `exit ${r.status}`}): apt-get install bible-kjv bible-kjv-text`,
  );
  process.exit(69);
}

/** Chapters in book order, each its heading and verses. */
const chapters: string[][] = [];
for (const line of r.stdout.split('\n')) {
  const verse = /^\s+\d+ (.*)$/.exec(line);
  if (verse) chapters.at(-1)?.push(verse[1] as string);
  else if (line.trim() !== '') chapters.push([line.trim(), '']);
}
const text = (list: string[][]): string => list.map((c) => c.join('\n') + '\n').join('\n');
const train = chapters.filter((_, i) => i % 20 !== 19);
const held = chapters.filter((_, i) => i % 20 === 19);
writeFileSync(trainOut, text(train));
writeFileSync(heldOut, text(held));
console.log(
  `${chapters.length} chapters: ${train.length} (${text(train).length} characters) to ${trainOut}, ` +
    `${held.length} (${text(held).length} characters) to ${heldOut}`,
);
