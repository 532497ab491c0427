import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The dashboard is built into build/web (served by `tandem serve` at /); everything it uses is
// bundled, so that the page needs no network but the server's.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  logLevel: 'warn',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: fileURLToPath(new URL('../build/web', import.meta.url)),
    emptyOutDir: true,
    assetsDir: 'assets',
    chunkSizeWarningLimit: 1024,
  },
});
