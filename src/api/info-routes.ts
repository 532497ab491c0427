import { parseDetokenizeRequest, parseTokenizeRequest } from './openai-types.js';
import { sendJson, type RouteContext } from './route-context.js';
import { completionPrompt } from './served-model.js';

/** GET /v1/models: the model this server answers (once loaded). */
export function modelList(ctx: Pick<RouteContext, 'served'> | undefined): object {
  const data = ctx
    ? [{ id: ctx.served.name, object: 'model', created: ctx.served.created, owned_by: 'tandem' }]
    : [];
  return { object: 'list', data };
}

/** POST /tokenize: `{content, add_special?}` -> `{tokens}` (BOS as the model asks unless add_special says). */
export async function tokenize(ctx: RouteContext): Promise<void> {
  const request = parseTokenizeRequest(ctx.body);
  const tokens =
    request.addSpecial === undefined
      ? request.content === ''
        ? []
        : completionPrompt(ctx.served, request.content)
      : ctx.served.tokenizer.encode(request.content, { addBos: request.addSpecial, addEos: false });
  sendJson(ctx.res, 200, { tokens });
}

/** POST /detokenize: `{tokens}` -> `{content}` (control tokens render as nothing). */
export async function detokenize(ctx: RouteContext): Promise<void> {
  const request = parseDetokenizeRequest(ctx.body);
  completionPrompt(ctx.served, request.tokens, 'tokens'); // checks the ids against the vocabulary
  sendJson(ctx.res, 200, { content: ctx.served.tokenizer.decode(request.tokens) });
}
