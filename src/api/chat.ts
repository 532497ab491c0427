import { toHttpError } from './errors.js';
import { startGeneration, type Delta, type GenerationOutcome } from './generation.js';
import type { TokenLogprob } from './logprobs.js';
import { parseChatRequest } from './openai-types.js';
import { checkModelName, completionId, sendJson, unixNow, type RouteContext } from './route-context.js';
import { chatPrompt, tokenBudget } from './served-model.js';
import { EventStream } from './sse.js';

function usage(o: GenerationOutcome): {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
} {
  return {
    prompt_tokens: o.promptTokens,
    completion_tokens: o.completionTokens,
    total_tokens: o.promptTokens + o.completionTokens,
  };
}

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
  if (!request.stream) {
    let text = '';
    const entries: TokenLogprob[] = [];
    const outcome = await startGeneration(
      ctx.served,
      ctx.scheduler,
      prompt,
      maxTokens,
      request,
      ctx.signal,
      (d) => {
        text += d.text;
        entries.push(...d.logprobs);
      },
    );
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
  const onDelta = (d: Delta): void =>
    stream.send(chunk({ content: d.text }, null, wantLogprobs ? d.logprobs : undefined));
  const generation = startGeneration(
    ctx.served,
    ctx.scheduler,
    prompt,
    maxTokens,
    request,
    ctx.signal,
    onDelta,
  );
  // deltas come from the scheduler's loop in a later turn, once the stream exists
  const stream = new EventStream(ctx.res);
  stream.send(chunk({ role: 'assistant', content: '', refusal: null }, null));
  let outcome: GenerationOutcome;
  try {
    outcome = await generation;
  } catch (error) {
    stream.fail(toHttpError(error).body);
    return;
  }
  stream.send(chunk({}, outcome.finishReason));
  if (request.includeUsage)
    stream.send({ ...head('chat.completion.chunk'), choices: [], usage: usage(outcome) });
  stream.done();
}
