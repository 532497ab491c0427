import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Writes, into `dir`, the client a namespace test runs inside the coordinator's namespace
 * (the test process cannot reach it): `node client.mjs URL PROMPTS_JSON` streams one greedy
 * completion per prompt at once (24 tokens), prints a JSON line `{chunk, at}` per text chunk,
 * then one `{texts, cluster}` with each text (or `ERROR message`) and GET /v1/cluster.
 * Returns its path.
 */
export function writeStreamClient(dir: string): string {
  const path = join(dir, 'client.mjs');
  writeFileSync(path, SCRIPT);
  return path;
}

const SCRIPT = `const [url, promptsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
async function stream(i) {
  const res = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: prompts[i], max_tokens: 24, temperature: 0, stream: true }), signal: AbortSignal.timeout(150000) });
  let text = '', pending = '', error = null;
  const decoder = new TextDecoder();
  for await (const bytes of res.body) {
    pending += decoder.decode(bytes, { stream: true });
    const events = pending.split('\\n\\n');
    pending = events.pop();
    for (const e of events) {
      const data = e.replace(/^data: /, '');
      if (data === '[DONE]') continue;
      const chunk = JSON.parse(data);
      if (chunk.error) error = chunk.error.message;
      for (const c of chunk.choices ?? []) if (c.text) { text += c.text; say({ chunk: i, at: Date.now() }); }
    }
  }
  return error ? 'ERROR ' + error : text;
}
const texts = await Promise.all(prompts.map((_, i) => stream(i)));
const cluster = await (await fetch(url + '/v1/cluster')).json();
say({ texts, cluster });
`;
