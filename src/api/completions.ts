import { collectGeneration, streamGeneration, usage } from './generation.js';
import type { TokenLogprob } from './logprobs.js';
import { parseCompletionRequest } from './openai-types.js';
import { checkModelName, completionId, sendJson, unixNow, type RouteContext } from './route-context.js';
import { completionPrompt, tokenBudget } from './served-model.js';

/** The legacy route's logprobs: parallel arrays, alternatives as {token: logprob} maps. */
interface LegacyLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

/** `offset`: characters of the completion before these tokens. */
function legacyLogprobs(entries: readonly TokenLogprob[], offset: number): LegacyLogprobs {
  const out: LegacyLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (const e of entries) {
    out.tokens.push(e.token);
    out.token_logprobs.push(e.logprob);
    out.top_logprobs.push(Object.fromEntries(e.top_logprobs.map((t) => [t.token, t.logprob])));
    out.text_offset.push(offset);
    offset += e.token.length;
  }
  return out;
}

/** POST /v1/completions: a `text_completion`, or a stream of them (one choice each). */
export async function completions(ctx: RouteContext): Promise<void> {
  const request = parseCompletionRequest(ctx.body);
  checkModelName(ctx.served, request.model);
  const prompt = completionPrompt(ctx.served, request.prompt);
  const maxTokens = tokenBudget(ctx.served, prompt.length, request.maxTokens, 'prompt');
  const head = {
    id: completionId('cmpl'),
    object: 'text_completion',
    created: unixNow(),
    model: ctx.served.name,
  };
  const wantLogprobs = request.logprobs !== undefined;
  // with echo the prompt's text comes first: as sent, or its ids decoded
  let echoed = request.echo
    ? typeof request.prompt === 'string'
      ? request.prompt
      : ctx.served.tokenizer.decode(prompt)
    : '';
  const g = { ctx, prompt, maxTokens, params: request };
  if (!request.stream) {
    const { text, entries, outcome } = await collectGeneration(g);
    sendJson(ctx.res, 200, {
      ...head,
      choices: [
        {
          text: echoed + text,
          index: 0,
          logprobs: wantLogprobs ? legacyLogprobs(entries, 0) : null,
          finish_reason: outcome.finishReason,
        },
      ],
      usage: usage(outcome),
    });
    return;
  }
  const extra = request.includeUsage ? { usage: null } : {};
  let offset = 0;
  const ran = await streamGeneration(g, (stream, d) => {
    const logprobs = wantLogprobs ? legacyLogprobs(d.logprobs, offset) : null;
    offset += d.text.length;
    const text = echoed + d.text;
    echoed = '';
    stream.send({ ...head, choices: [{ text, index: 0, logprobs, finish_reason: null }], ...extra });
  });
  if (!ran) return;
  const { stream, outcome } = ran;
  // a completion that wrote no text still echoes its prompt, in its last chunk
  stream.send({
    ...head,
    choices: [{ text: echoed, index: 0, logprobs: null, finish_reason: outcome.finishReason }],
    ...extra,
  });
  if (request.includeUsage) stream.send({ ...head, choices: [], usage: usage(outcome) });
  stream.done();
}
