import { readTokenizer } from '../engine/model/gguf-model-file.js';
import { TandemError } from '../errors/index.js';
import { runDistributed, type DistributedResult, type RunDistributedOptions } from './distributed.js';
import { resolveModelPath } from './model-path.js';

export interface DistributedTextOptions extends Omit<
  RunDistributedOptions,
  'prompt' | 'stopTokens' | 'onToken'
> {
  /** Prompt text (tokenized with the model's tokenizer)... */
  prompt?: string;
  /** ...or token ids. */
  promptTokens?: readonly number[];
  /** Each decoded piece of text as soon as its token arrives (end-of-generation tokens are not shown). */
  onText?: (piece: string) => void;
}

/**
 * `tandem run MODEL --nodes N | --hosts FILE` with text in and out: tokenizes the prompt with
 * the model's tokenizer, stops at its end-of-generation tokens, streams the decoded text.
 */
export async function runDistributedText(
  o: DistributedTextOptions,
): Promise<DistributedResult & { text: string; promptTokens: number[] }> {
  const model = resolveModelPath(o.model);
  const tokenizer = readTokenizer(model);
  let prompt: number[];
  if (o.promptTokens !== undefined) prompt = [...o.promptTokens];
  else if (o.prompt !== undefined && tokenizer) prompt = tokenizer.encode(o.prompt);
  else
    throw new TandemError('CLI_USAGE', 'run: this model has no tokenizer; pass --prompt-tokens', {
      hint: 'give the prompt as token ids, e.g. --prompt-tokens 1,2,3',
    });
  const stopTokens: number[] = [];
  if (tokenizer)
    for (let id = 0; id < tokenizer.vocabSize; id++) if (tokenizer.isEndOfGeneration(id)) stopTokens.push(id);
  const stream = tokenizer?.streamDecoder();
  const stops = new Set(stopTokens);
  let text = '';
  const { prompt: _text, promptTokens: _ids, onText, ...rest } = o;
  const result = await runDistributed({
    ...rest,
    model,
    prompt,
    stopTokens,
    onToken: (token) => {
      if (!stream || stops.has(token)) return;
      const piece = stream.push(token);
      text += piece;
      if (piece) onText?.(piece);
    },
  });
  const tail = stream?.flush() ?? '';
  if (tail) onText?.(tail);
  return { ...result, text: text + tail, promptTokens: prompt };
}
