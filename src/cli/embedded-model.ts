import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ApiServer, loadClusterServedModel } from '../api/index.js';
import type { ClusterView } from '../cluster/index.js';
import { TandemError } from '../errors/index.js';

/**
 * The model that ships in the repository (models/, its recipe in models/README.md): what
 * `tandem serve` answers with when no MODEL is given, so a first request needs no download.
 */
export const EMBEDDED_MODEL = {
  path: join(import.meta.dirname, '..', '..', 'models', 'tandem-tiny.gguf'),
  name: 'tandem-tiny',
  /** What it is and what it is not, for --help and the first lines a user sees. */
  about:
    'tandem-tiny: a 4.2M-parameter llama (4 layers, width 256, Q8_0, 4.5 MB) trained by `tandem train` on ' +
    "the King James Bible (Debian's bible-kjv-text, public domain), 4.1M tokens. It writes fluent fragments of " +
    'such text; it knows nothing and follows no instructions (models/README.md)',
} as const;

/** The embedded model's path; a checkout without models/ (a trimmed package) says so instead of failing later. */
export function embeddedModelPath(command: string): string {
  if (!existsSync(EMBEDDED_MODEL.path))
    throw new TandemError('CLI_USAGE', `${command}: no MODEL given and the embedded model is missing`, {
      hint: `pass a .gguf file, or restore ${EMBEDDED_MODEL.path} (git checkout models/)`,
      details: { path: EMBEDDED_MODEL.path },
    });
  return EMBEDDED_MODEL.path;
}

/** What the demo's last step served and answered. */
export interface FirstAnswer {
  url: string;
  answer: string;
  /** The members that served it, as `/v1/cluster` lists them, and how the model was split. */
  members: { id: string; state: string }[];
  parallel: string;
  /** Stops the server and its nodes. */
  close: () => Promise<void>;
}

/**
 * Serves the shipped model over HTTP on a free loopback port, split across `nodes` local node
 * processes (tensor parallel, as `tandem serve --nodes` does), asks it one chat question
 * through the OpenAI route as any client would, and reads `/v1/cluster`: the last step of
 * the demo. The server keeps serving (its dashboard included) until `close`, which stops the
 * nodes too; it is closed already when this throws.
 */
export async function firstAnswer(question: string, maxTokens: number, nodes = 2): Promise<FirstAnswer> {
  const path = embeddedModelPath('demo');
  const server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots: 1,
    maxQueue: 1,
    load: () => loadClusterServedModel(path, { nodes, parallel: 'tp', threads: 1, context: 256 }),
  });
  try {
    await server.ready;
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: question }],
        max_tokens: maxTokens,
        temperature: 0,
      }),
    });
    const body = (await res.json()) as { choices?: { message?: { content?: string } }[] };
    if (res.status !== 200)
      throw new Error(`demo: tandem's own server answered ${res.status}: ${JSON.stringify(body)}`);
    const cluster = (await (await fetch(`${server.url}/v1/cluster`)).json()) as ClusterView;
    return {
      url: server.url,
      answer: body.choices?.[0]?.message?.content ?? '',
      members: cluster.members.map((m) => ({ id: m.id, state: m.state })),
      parallel: cluster.placement?.parallel ?? '?',
      close: () => server.close(0),
    };
  } catch (error) {
    await server.close(0);
    throw error;
  }
}
