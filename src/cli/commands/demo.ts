import { statSync } from 'node:fs';
import { defineCommand } from '../options.js';
import { checkInteger, checkThreads, threadsBound } from '../checks.js';
import { TandemError } from '../../errors/index.js';
import {
  demoModel,
  demoShapeName,
  demoWarmupTokens,
  runDemo,
  whySplitMayNotPay,
} from '../../cluster/index.js';
import { EMBEDDED_MODEL, firstAnswer, type FirstAnswer } from '../embedded-model.js';

export const command = defineCommand({
  name: 'demo',
  summary: 'one model on one node and across two local nodes: tokens, TTFT, tokens/s, and whether they agree',
  description:
    `Makes (once, cached under ~/.cache/tandem or $TANDEM_CACHE_DIR) an F32 model with the shape of ${demoShapeName} and RANDOM weights, ` +
    'then runs the same prompt on one node and split across two local node processes (tensor parallel), and prints both. ' +
    'The figures are measured as `tandem bench cluster` measures them: both configurations loaded side by side and warmed up, then --repeat timed rounds alternated, the best of each shown; when the split is slower, one line says why. ' +
    'The text means nothing (the weights are random); the point is that both runs produce the same tokens. ' +
    `Last, it serves the model that ships with tandem over the OpenAI-compatible API on a free loopback port, split across 2 local node processes, and prints its answer to the prompt and the members that served it (${EMBEDDED_MODEL.about}); \`tandem serve\` keeps such a server up.`,
  options: {
    prompt: { type: 'string', description: 'prompt text', default: 'The capital of France is' },
    'max-tokens': { type: 'number', description: 'tokens to generate', default: 32 },
    provider: {
      type: 'string',
      description: 'fabric provider between the nodes',
      choices: ['shm', 'tcp'],
      default: 'shm',
    },
    parallel: {
      type: 'string',
      description:
        'how the two nodes split the model: tp (tensor parallel, faster decode) or pp (pipeline, bit-exact)',
      choices: ['tp', 'pp'],
      default: 'tp',
    },
    threads: { type: 'number', description: `threads per node, ${threadsBound}`, default: 1 },
    repeat: {
      type: 'number',
      description: 'timed rounds of each configuration, alternated; the best of each counts',
      default: 3,
    },
    json: { type: 'boolean', description: 'print one JSON object' },
    serve: {
      type: 'boolean',
      description: `last, serve the shipped ${EMBEDDED_MODEL.name} over the OpenAI API and print its first answer (--no-serve skips it)`,
      default: true,
    },
    'keep-serving': {
      type: 'boolean',
      description:
        'after the answer, keep serving (the API and the dashboard) until Ctrl-C (default: when stdout is a terminal and not --json)',
    },
  },
  examples: ['tandem demo', 'tandem demo --max-tokens 64 --json', 'tandem demo --no-keep-serving'],
  async run({ options }) {
    const maxTokens = options['max-tokens'];
    if (!Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > 1024)
      throw new TandemError('CLI_USAGE', `demo: --max-tokens must be 1..1024, got ${maxTokens}`, {
        hint: 'for example --max-tokens 32',
      });
    checkThreads('demo', options.threads);
    checkInteger('demo', 'repeat', options.repeat, 1, 100, 3);
    const tty = process.stderr.isTTY && !options.json;
    const progress = (line: string): void => {
      if (options.json) return;
      process.stderr.write(tty ? `\r${line}\x1b[K` : `${line}\n`);
    };
    const done = (): void => void (tty && process.stderr.write('\n'));
    if (!options.json)
      process.stderr.write(
        `tandem demo: a ${demoShapeName}-shaped model with RANDOM weights (its text means nothing)\n`,
      );
    const { path, made } = await demoModel(progress);
    if (made) done();
    progress(made ? `made ${path}` : `using cached ${path}`);
    done();
    const { prompt, runs } = await runDemo(path, {
      prompt: options.prompt,
      maxTokens,
      provider: options.provider,
      parallel: options.parallel,
      threads: options.threads,
      repeat: options.repeat,
      onProgress: (l) => (progress(l), done()),
    });
    const [one, two] = runs as [(typeof runs)[0], (typeof runs)[0]];
    const agree = one.tokens.length === two.tokens.length && one.tokens.every((t, i) => t === two.tokens[i]);
    const prefix = agree ? one.tokens.length : one.tokens.findIndex((t, i) => t !== two.tokens[i]);
    if (options.serve) {
      progress(`serving ${EMBEDDED_MODEL.name} and asking it the prompt over HTTP`);
      done();
    }
    const served = options.serve ? await firstAnswer(options.prompt, maxTokens) : undefined;
    if (options.json) {
      const row = (r: typeof one): Record<string, unknown> => ({
        nodes: r.nodes,
        tokens: r.tokens,
        text: r.text,
        ttft_ms: r.ttftMs,
        decode_tok_s: r.decodeTokS,
        nodes_metrics: r.result.nodes,
      });
      process.stdout.write(
        JSON.stringify({
          model: path,
          random_weights: true,
          prompt_tokens: prompt,
          runs: [row(one), row(two)],
          agree,
          agreeing_prefix: prefix,
          ...(served
            ? {
                served: {
                  model: EMBEDDED_MODEL.name,
                  url: served.url,
                  answer: served.answer,
                  members: served.members,
                  parallel: served.parallel,
                },
              }
            : {}),
        }) + '\n',
      );
      if (served) {
        if (options['keep-serving'] === true) await serveUntilStopped(served);
        await served.close();
      }
      return agree ? 0 : 1;
    }
    const out: string[] = [];
    out.push(`prompt: ${JSON.stringify(options.prompt)} (${prompt.length} tokens)`);
    for (const r of runs) {
      out.push('');
      out.push(
        `${r.nodes} node${r.nodes > 1 ? `s (${options.parallel === 'tp' ? 'tensor' : 'pipeline'} parallel: ${r.plan.join('; ')})` : ''}`,
      );
      out.push(`  tokens: ${r.tokens.join(' ')}`);
      out.push(`  text:   ${JSON.stringify(r.text)}`);
      out.push(`  TTFT ${r.ttftMs.toFixed(1)} ms, decode ${r.decodeTokS.toFixed(1)} tokens/s`);
    }
    out.push('');
    if (!agree) {
      out.push(`tokens agree: the first ${prefix} of ${one.tokens.length}, then they part.`);
      out.push(
        "  Tensor-parallel partial sums round differently from one node's in the last bit; a random-weight model amplifies that until a",
      );
      out.push(
        '  near-tie between two tokens flips. `tandem demo --parallel pp` splits by layers and is bit-exact.',
      );
    }
    const speedup = two.decodeTokS / one.decodeTokS;
    out.push(
      `tokens agree: ${agree ? 'yes' : 'no'}; decode speedup ${speedup.toFixed(2)}x, TTFT speedup ${(one.ttftMs / two.ttftMs).toFixed(2)}x ` +
        `(best of ${options.repeat} alternated round(s) each, after ${demoWarmupTokens} warm-up tokens)`,
    );
    const why = whySplitMayNotPay({
      speedup,
      nodes: 2,
      commShare: two.result.nodes.reduce((a, m) => a + m.commShare, 0) / two.result.nodes.length,
      local: true,
      threadsPerNode: options.threads,
      modelBytes: statSync(path).size,
      repeat: options.repeat,
    });
    if (why) out.push(why);
    if (served) {
      out.push('');
      out.push(
        `served ${EMBEDDED_MODEL.name} (trained by tandem train on the King James Bible, tiny: fluent fragments, no knowledge) at ${served.url}, split across ${served.members.length} local nodes (${served.parallel}: ${served.members.map((m) => `${m.id} ${m.state}`).join(', ')})`,
      );
      out.push(
        `  POST /v1/chat/completions ${JSON.stringify(options.prompt)} -> ${JSON.stringify(served.answer)}`,
      );
      out.push(`  dashboard: ${served.url}/`);
      out.push('  `tandem serve` keeps such a server up (README, "Serving").');
    }
    process.stdout.write(out.join('\n') + '\n');
    if (served) {
      const keep = options['keep-serving'] ?? (process.stdout.isTTY === true && !options.json);
      if (keep) await serveUntilStopped(served);
      await served.close();
    }
    return agree ? 0 : 1;
  },
});

/** Keeps the demo's server up until SIGINT or SIGTERM, saying so. */
async function serveUntilStopped(served: FirstAnswer): Promise<void> {
  process.stderr.write(
    `serving at ${served.url} (dashboard at ${served.url}/) until Ctrl-C; --no-keep-serving ends the demo here\n`,
  );
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
}
