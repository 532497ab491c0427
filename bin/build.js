#!/usr/bin/env node
// `npm run build`: compiles the WebAssembly kernels and (optionally) the native kernels when
// missing or older than their sources (`--force` rebuilds both; see src/kernels/build-kernels.js),
// then builds the dashboard into build/web (bin/build-web.js).
import { buildKernels, buildNative } from '../src/kernels/build-kernels.js';
import { buildWeb } from './build-web.js';

const force = process.argv.includes('--force');
try {
  await buildKernels({ force, quiet: false });
} catch (err) {
  console.error(err.message);
  process.exit(1);
}
await buildNative({ force, quiet: false }).catch((err) => {
  console.log(
    `native kernels not built (optional; the WebAssembly kernels will run): ${String(err.message).split('\n')[0]}`,
  );
});
try {
  await buildWeb();
  console.log('dashboard built into build/web');
} catch (err) {
  console.error(`the dashboard did not build: ${err.message}`);
  process.exit(1);
}
