import { collectGeneration, streamGeneration, usage } from './generation.js';
import type { TokenLogprob } from './logprobs.js';
import { parseChatRequest } from './openai-types.js';
import { checkModelName, completionId, sendJson, unixNow, type RouteContext } from './route-context.js';
import { chatPrompt, tokenBudget } from './served-model.js';

function logprobsOf(entries: TokenLogprob[] | undefined): { content: TokenLogprob[]; refusal: null } | null {
  return entries ? { content: entries, refusal: null } : null;
}

/** POST /v1/chat/completions: a `chat.completion`, or a stream of `chat.completion.chunk`s. */
export async function chatCompletions(ctx: RouteContext): Promise<void> {
  const request = parseChatRequest(ctx.body);
  checkModelName(ctx.served, request.model);
  const prompt = chatPrompt(ctx.served, request.messages);
  const maxTokens = tokenBudget(ctx.served, prompt.length, request.maxTokens, 'messages');
  const id = completionId('chatcmpl');
  const created = unixNow();
  // OpenAI's field order: id, object, created, model
  const head = (object: string): object => ({ id, object, created, model: ctx.served.name });
  const wantLogprobs = request.logprobs !== undefined;
  const g = { ctx, prompt, maxTokens, params: request };
  if (!request.stream) {
    const { text, entries, outcome } = await collectGeneration(g);
    sendJson(ctx.res, 200, {
      ...head('chat.completion'),
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: text, refusal: null },
          logprobs: logprobsOf(wantLogprobs ? entries : undefined),
          finish_reason: outcome.finishReason,
        },
      ],
      usage: usage(outcome),
    });
    return;
  }
  const extra = request.includeUsage ? { usage: null } : {};
  const chunk = (delta: object, finishReason: string | null, entries?: TokenLogprob[]): object => ({
    ...head('chat.completion.chunk'),
    choices: [{ index: 0, delta, logprobs: logprobsOf(entries), finish_reason: finishReason }],
    ...extra,
  });
  const ran = await streamGeneration(
    g,
    (stream, d) => stream.send(chunk({ content: d.text }, null, wantLogprobs ? d.logprobs : undefined)),
    (stream) => stream.send(chunk({ role: 'assistant', content: '', refusal: null }, null)),
  );
  if (!ran) return;
  const { stream, outcome } = ran;
  stream.send(chunk({}, outcome.finishReason));
  if (request.includeUsage)
    stream.send({ ...head('chat.completion.chunk'), choices: [], usage: usage(outcome) });
  stream.done();
}
