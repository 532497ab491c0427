import { JsonConstraint, Sampler, type Tokenizer } from '../engine/index.js';
import { TandemError, isTandemError } from '../errors/index.js';
import { badRequest, toHttpError } from './errors.js';
import { tokenLogprob, type TokenLogprob } from './logprobs.js';
import type { GenerationParams } from './openai-types.js';
import type { RequestTrace } from './request-trace.js';
import type { RouteContext } from './route-context.js';
import type { Scheduler, SequenceEnd } from './scheduler.js';
import type { ServedModel } from './served-model.js';
import { EventStream } from './sse.js';
import { StopText } from './stop-text.js';

/** A piece of the completion's text, with the logprobs of the tokens that made it (when asked for). */
export interface Delta {
  text: string;
  logprobs: TokenLogprob[];
}

export interface GenerationOutcome {
  finishReason: 'stop' | 'length';
  promptTokens: number;
  /** Prompt tokens whose K/V a slot held from an earlier prompt (not prefilled again). */
  cachedPromptTokens: number;
  /** Every token generated, the end-of-generation token and a stop string's tokens included. */
  completionTokens: number;
}

/**
 * OpenAI's `usage` object: exact token counts of one completion; prompt_tokens counts the
 * cached ones too (as OpenAI's does), prompt_tokens_details.cached_tokens says how many.
 */
export function usage(o: GenerationOutcome): {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
} {
  return {
    prompt_tokens: o.promptTokens,
    completion_tokens: o.completionTokens,
    total_tokens: o.promptTokens + o.completionTokens,
    prompt_tokens_details: { cached_tokens: o.cachedPromptTokens },
  };
}

/**
 * The sampler for OpenAI's parameters: no top-k or min-p, penalties over the generated tokens
 * only, the response_format's JSON constraint (ended by `stopTokens`); a logit_bias token
 * past the vocabulary is a 400 naming it.
 */
export function samplerFor(
  params: GenerationParams,
  contextLength: number,
  vocabSize: number,
  tokenizer: Tokenizer,
  stopTokens: ReadonlySet<number>,
): Sampler {
  for (const id of params.logitBias.keys())
    if (id >= vocabSize)
      throw badRequest(
        'logit_bias',
        `'logit_bias' names token ${id}, past the model's vocabulary of ${vocabSize} tokens`,
      );
  return new Sampler({
    temperature: params.topP === 0 ? 0 : params.temperature,
    topP: params.topP === 0 ? 1 : params.topP,
    topK: 0,
    minP: 0,
    repeatPenalty: 1,
    repeatLastN: contextLength,
    presencePenalty: params.presencePenalty,
    frequencyPenalty: params.frequencyPenalty,
    logitBias: params.logitBias,
    ...(params.seed !== undefined ? { seed: params.seed } : {}),
    ...(params.responseFormat !== undefined
      ? { constraint: new JsonConstraint(tokenizer, params.responseFormat, stopTokens) }
      : {}),
  });
}

/**
 * Queues one completion and turns its tokens into text deltas: decoded whole characters, stop
 * strings cut off (never sent), end-of-generation tokens not rendered. Throws at once when
 * the scheduler refuses it (429 queue full, 503 closing), before anything was sent; the
 * promise rejects when the generation fails later. `trace` gets the queue, token and end times.
 */
export function startGeneration(
  served: ServedModel,
  scheduler: Scheduler,
  prompt: readonly number[],
  maxTokens: number,
  params: GenerationParams,
  signal: AbortSignal,
  onDelta: (delta: Delta) => void,
  trace?: RequestTrace,
): Promise<GenerationOutcome> {
  const { tokenizer } = served;
  const sampler = samplerFor(
    params,
    served.contextLength,
    served.model.config.vocabSize,
    tokenizer,
    served.stopTokens,
  );
  const decoder = tokenizer.streamDecoder();
  const stop = new StopText(params.stop);
  let pending: TokenLogprob[] = [];
  const onToken = (token: number, logits: Float32Array | undefined): boolean => {
    trace?.token();
    if (served.stopTokens.has(token)) return true;
    if (params.logprobs !== undefined) {
      if (!logits)
        throw new TandemError('INTERNAL', 'a token came without the logits its logprobs need', {
          hint: 'this is a bug: report it',
        });
      pending.push(tokenLogprob(tokenizer, logits, token, params.logprobs));
    }
    const text = stop.push(decoder.push(token));
    // the tokens that completed a stop string wrote text that is not sent: so are their logprobs
    if (stop.stopped) pending = [];
    if (text !== '' || stop.stopped) {
      if (text !== '') onDelta({ text, logprobs: pending });
      pending = [];
    }
    return !stop.stopped;
  };
  const onEnd = (end: SequenceEnd): GenerationOutcome => {
    const tail = stop.push(decoder.flush()) + stop.flush();
    if (tail !== '' || pending.length > 0) onDelta({ text: tail, logprobs: pending });
    const finishReason = stop.stopped ? 'stop' : end.reason;
    trace?.finished(finishReason);
    return {
      finishReason,
      promptTokens: prompt.length,
      cachedPromptTokens: end.cachedPromptTokens,
      completionTokens: end.generated,
    };
  };
  trace?.queued(prompt.length);
  const ended = scheduler.submit({
    prompt,
    maxTokens,
    pick: (logits) => sampler.sample(logits),
    // a greedy pick that no logprobs read: a cluster answers the token alone
    argmaxOnly: sampler.greedy && params.logprobs === undefined,
    stopTokens: served.stopTokens,
    onToken,
    signal,
    ...(trace ? { onAdmit: () => trace.admitted() } : {}),
  });
  return ended.then(onEnd, (error: unknown) => {
    const failure = generationFailure(error);
    trace?.fail(failure);
    throw failure;
  });
}

/**
 * What a client is told when a generation fails after it was accepted: the api layer's own
 * errors (cancelled, shutting down) as they are; an engine error here is not the request's
 * fault (the request was checked before it was queued), so it is a 500, never a 400.
 */
function generationFailure(error: unknown): unknown {
  if (!isTandemError(error) || error.code.startsWith('API_')) return error;
  return new TandemError('INTERNAL', `the generation failed: ${error.message}`, {
    hint: error.hint,
    details: { ...error.details, code: error.code },
    cause: error,
  });
}

/** One completion request's generation, as both OpenAI routes run it. */
export interface RouteGeneration {
  ctx: RouteContext;
  prompt: readonly number[];
  maxTokens: number;
  params: GenerationParams;
}

/** Runs a non-streamed completion to its end: the whole text and every token's logprobs. */
export async function collectGeneration(
  g: RouteGeneration,
): Promise<{ text: string; entries: TokenLogprob[]; outcome: GenerationOutcome }> {
  let text = '';
  const entries: TokenLogprob[] = [];
  const outcome = await startGeneration(
    g.ctx.served,
    g.ctx.scheduler,
    g.prompt,
    g.maxTokens,
    g.params,
    g.ctx.signal,
    (d) => {
      text += d.text;
      entries.push(...d.logprobs);
    },
    g.ctx.trace,
  );
  return { text, entries, outcome };
}

/**
 * Runs a streamed completion: queues it (a refusal throws before any byte is sent), opens the
 * event stream, lets `open` send what comes first, and sends each delta through `onDelta`.
 * Resolves with the outcome, or with undefined once a failure after the stream began has been
 * sent as an error event (the stream is then closed).
 */
export async function streamGeneration(
  g: RouteGeneration,
  onDelta: (stream: EventStream, delta: Delta) => void,
  open: (stream: EventStream) => void = () => {},
): Promise<{ stream: EventStream; outcome: GenerationOutcome } | undefined> {
  const generation = startGeneration(
    g.ctx.served,
    g.ctx.scheduler,
    g.prompt,
    g.maxTokens,
    g.params,
    g.ctx.signal,
    (d) => onDelta(stream, d),
    g.ctx.trace,
  );
  // deltas come from the scheduler's loop in a later turn, once the stream exists
  const stream = new EventStream(g.ctx.res);
  open(stream);
  try {
    return { stream, outcome: await generation };
  } catch (error) {
    stream.fail(toHttpError(error).body);
    return undefined;
  }
}
