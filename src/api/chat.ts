import { collectGeneration, streamGeneration, usage } from './generation.js';
import type { TokenLogprob } from './logprobs.js';
import { parseChatRequest } from './openai-types.js';
import { checkModelName, completionId, sendJson, unixNow, type RouteContext } from './route-context.js';
import { chatPrompt, tokenBudget } from './served-model.js';
import type { EventStream } from './sse.js';
import { CallStreamer, callShape, mayBeCalls, readToolCalls, type ToolCall } from './tools.js';

function logprobsOf(entries: TokenLogprob[] | undefined): { content: TokenLogprob[]; refusal: null } | null {
  return entries ? { content: entries, refusal: null } : null;
}

/** POST /v1/chat/completions: a `chat.completion`, or a stream of `chat.completion.chunk`s. */
export async function chatCompletions(ctx: RouteContext): Promise<void> {
  const request = parseChatRequest(ctx.body);
  checkModelName(ctx.served, request.model);
  const offered = request.toolChoice === 'none' ? [] : request.tools;
  const prompt = chatPrompt(ctx.served, request.messages, offered);
  const maxTokens = tokenBudget(ctx.served, prompt.length, request.maxTokens, 'messages');
  const id = completionId('chatcmpl');
  const created = unixNow();
  // OpenAI's field order: id, object, created, model
  const head = (object: string): object => ({ id, object, created, model: ctx.served.name });
  const wantLogprobs = request.logprobs !== undefined;
  // a forced call is held to its JSON shape; with "auto" the model answers freely
  const shape = callShape(request.tools, request.toolChoice);
  const params = shape ? { ...request, responseFormat: shape } : request;
  const g = { ctx, prompt, maxTokens, params };
  // calls are an answer that ended by itself (not cut off) and reads as calls
  const callsIn = (text: string, finish: string): ToolCall[] | undefined =>
    offered.length > 0 && finish === 'stop' ? readToolCalls(text, offered) : undefined;
  if (!request.stream) {
    const { text, entries, outcome } = await collectGeneration(g);
    const calls = callsIn(text, outcome.finishReason);
    sendJson(ctx.res, 200, {
      ...head('chat.completion'),
      choices: [
        {
          index: 0,
          message: calls
            ? { role: 'assistant', content: null, tool_calls: calls, refusal: null }
            : { role: 'assistant', content: text, refusal: null },
          logprobs: logprobsOf(wantLogprobs ? entries : undefined),
          finish_reason: calls ? 'tool_calls' : outcome.finishReason,
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
  // With tools offered, an answer that is calls goes out as calls as it is generated
  // (CallStreamer; each token's logprobs with the first delta its text completes); text that
  // may still be calls (mayBeCalls) is held back until it is, or until it shows it is not and
  // goes out as it came.
  let held: { text: string; logprobs: TokenLogprob[] } | undefined =
    offered.length > 0 ? { text: '', logprobs: [] } : undefined;
  const streamer = new CallStreamer(new Set(offered.map((t) => t.name)));
  const send = (stream: EventStream, text: string, lp: TokenLogprob[]): void =>
    stream.send(chunk({ content: text }, null, wantLogprobs ? lp : undefined));
  const ran = await streamGeneration(
    g,
    (stream, d) => {
      if (held === undefined) return send(stream, d.text, d.logprobs);
      held.text += d.text;
      held.logprobs.push(...d.logprobs);
      const deltas = streamer.push(d.text);
      deltas.forEach((t, k) =>
        stream.send(chunk({ tool_calls: [t] }, null, wantLogprobs && k === 0 ? held?.logprobs : undefined)),
      );
      if (deltas.length > 0) held.logprobs = [];
      if (streamer.started || mayBeCalls(held.text)) return;
      send(stream, held.text, held.logprobs);
      held = undefined;
    },
    (stream) => stream.send(chunk({ role: 'assistant', content: '', refusal: null }, null)),
  );
  if (!ran) return;
  const { stream, outcome } = ran;
  const calls = held && !streamer.started ? callsIn(held.text, outcome.finishReason) : undefined;
  if (streamer.started) {
    // an answer cut off (length) keeps its finish reason, as OpenAI's does
    const finish = outcome.finishReason === 'stop' ? 'tool_calls' : outcome.finishReason;
    stream.send(chunk({}, finish, wantLogprobs ? held?.logprobs : undefined));
  } else if (calls) {
    const deltas = calls.map((c, index) => ({ index, ...c }));
    stream.send(chunk({ tool_calls: deltas }, null, wantLogprobs ? held?.logprobs : undefined));
    stream.send(chunk({}, 'tool_calls'));
  } else {
    if (held && held.text !== '') send(stream, held.text, held.logprobs);
    stream.send(chunk({}, outcome.finishReason));
  }
  if (request.includeUsage)
    stream.send({ ...head('chat.completion.chunk'), choices: [], usage: usage(outcome) });
  stream.done();
}
