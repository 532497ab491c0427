import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

/**
 * DESIGN.md's layer rule: each layer imports only the layers below it. `engine/` never
 * touches the network (no fabric, collectives or topology); `fabric/` knows nothing above it.
 * `util/` (process helpers every layer shares) lies below them all and imports none.
 * `parallel/` reaches the fabric only through collectives: its one-sided exchange, the
 * provider names and the footprint figures all come through collectives' exports.
 */
export const allowed: Record<string, readonly string[]> = {
  util: [],
  errors: ['util'],
  kernels: ['util', 'errors'],
  fabric: ['util', 'errors', 'kernels'],
  topology: ['util', 'errors', 'kernels', 'fabric'],
  collectives: ['util', 'errors', 'kernels', 'fabric', 'topology'],
  engine: ['util', 'errors', 'kernels'],
  parallel: ['util', 'errors', 'kernels', 'topology', 'collectives', 'engine'],
  cluster: ['util', 'errors', 'kernels', 'fabric', 'topology', 'collectives', 'engine', 'parallel'],
  api: ['util', 'errors', 'kernels', 'fabric', 'topology', 'collectives', 'engine', 'parallel', 'cluster'],
  cli: [
    'util',
    'errors',
    'kernels',
    'fabric',
    'topology',
    'collectives',
    'engine',
    'parallel',
    'cluster',
    'api',
  ],
};

const srcRoot = resolve(import.meta.dirname, '..', 'src');
const benchRoot = resolve(import.meta.dirname, '..', 'bench');

function sources(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sources(path, out);
    else if (/\.(ts|js|mts)$/.test(name) && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** Relative import specifiers of a source file (static, dynamic and re-exports). */
export function importsOf(text: string): string[] {
  const found: string[] = [];
  const pattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g;
  for (const match of text.matchAll(pattern)) found.push(match[1] as string);
  return found;
}

export function layerOf(path: string): string | undefined {
  const rel = relative(srcRoot, path);
  if (rel.startsWith('..')) return undefined;
  return rel.split(sep)[0];
}

test('every src/ folder is a known layer', () => {
  for (const name of readdirSync(srcRoot)) {
    if (statSync(join(srcRoot, name)).isDirectory())
      assert.ok(name in allowed, `src/${name} is not a layer of DESIGN.md`);
  }
});

test('imports point down the layer order', () => {
  const violations: string[] = [];
  for (const file of sources(srcRoot)) {
    const from = layerOf(file) as string;
    for (const spec of importsOf(readFileSync(file, 'utf8'))) {
      const target = resolve(dirname(file), spec);
      const to = layerOf(target);
      if (to === undefined) {
        // Outside src/ only package.json, and the benchmarks for the `tandem bench` commands.
        const benchForCli = from === 'cli' && target.startsWith(benchRoot + sep);
        if (!target.endsWith('package.json') && !benchForCli) {
          violations.push(`${relative(srcRoot, file)} imports ${spec} outside src/`);
        }
        continue;
      }
      if (to !== from && !(allowed[from] ?? []).includes(to)) {
        violations.push(`${relative(srcRoot, file)} (${from}) imports ${spec} (${to})`);
      }
    }
  }
  assert.deepEqual(violations, []);
});

test('parallel/ does not import fabric/: no module of parallel names a fabric module', () => {
  assert.ok(!allowed.parallel?.includes('fabric'));
  const fabricRoot = join(srcRoot, 'fabric');
  const reached: string[] = [];
  for (const file of sources(join(srcRoot, 'parallel'))) {
    for (const spec of importsOf(readFileSync(file, 'utf8'))) {
      const target = resolve(dirname(file), spec);
      if (target === fabricRoot || target.startsWith(fabricRoot + sep))
        reached.push(`${relative(srcRoot, file)} imports ${spec}`);
    }
  }
  assert.deepEqual(reached, []);
});

test('the import scanner sees static, dynamic and re-export imports', () => {
  const text = `import a from '../fabric/x.js';\nexport { b } from "./y.js";\nconst c = await import('../engine/z.js');\nimport './side.js';`;
  assert.deepEqual(importsOf(text), ['../fabric/x.js', './y.js', '../engine/z.js', './side.js']);
  assert.equal(layerOf(join(srcRoot, 'engine', 'gguf.ts')), 'engine');
});
