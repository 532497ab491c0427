// Builds the dashboard (web/) into build/web with Vite; `tandem serve` serves it at /.
// Everything the page uses is bundled from npm packages, so the build and the page need no network.
import { fileURLToPath } from 'node:url';

export async function buildWeb() {
  const { build } = await import('vite');
  await build({ configFile: fileURLToPath(new URL('../web/vite.config.ts', import.meta.url)) });
}
