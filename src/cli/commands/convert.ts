import { defineCommand } from '../options.js';
import { convertFolder } from '../../engine/format/convert-folder.js';
import { fileTypes, type FileTypeName } from '../../engine/format/model-plan.js';

function mib(n: number): string {
  return `${(n / 1048576).toFixed(1)} MiB`;
}

export const command = defineCommand({
  name: 'convert',
  summary:
    'write a Hugging Face or MLX model folder as a GGUF file (llama.cpp loads it with the same tokens)',
  description:
    'FOLDER holds config.json, tokenizer.json (and tokenizer_config.json) and the weights as safetensors (one file or shards with ' +
    'model.safetensors.index.json), in F32, F16 or BF16, or MLX affine-quantized (4 or 8 bits, as mlx_lm.convert -q writes them). ' +
    'Architectures: Llama 2/3, Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen2-MoE, Qwen3-MoE. Without --type the stored dtypes are kept ' +
    '(MLX-quantized weights become F16); run, serve and node also take the folder itself. See docs/formats.md.',
  positionals: [
    { name: 'folder', description: 'the model folder', required: true },
    { name: 'out', description: 'path of the .gguf file to write (replaced atomically)', required: true },
  ],
  options: {
    type: {
      type: 'string',
      description: 'file type of the weights (default: keep what the folder stores)',
      choices: Object.keys(fileTypes),
    },
    json: { type: 'boolean', description: 'print a JSON summary instead of text' },
  },
  examples: [
    'tandem convert ~/models/Qwen2.5-0.5B-Instruct /tmp/qwen.gguf',
    'tandem convert ~/models/Llama-3.2-1B-Instruct-4bit /tmp/llama.gguf --type q8_0',
  ],
  async run({ options, positionals }) {
    const [folder, out] = positionals as [string, string];
    const started = Date.now();
    const tty = process.stderr.isTTY && !options.json;
    let shown = 0;
    const result = await convertFolder(folder, out, {
      ...(options.type ? { type: options.type as FileTypeName } : {}),
      onProgress: (written, total, tensor) => {
        if (!tty || Date.now() - shown < 500) return;
        shown = Date.now();
        process.stderr.write(
          `\r  ${((100 * written) / total).toFixed(0).padStart(3)}%  ${mib(written)}  ${tensor}\x1b[K`,
        );
      },
    });
    if (tty) process.stderr.write('\r\x1b[K');
    const seconds = (Date.now() - started) / 1000;
    if (options.json) process.stdout.write(JSON.stringify({ folder, file: out, ...result, seconds }) + '\n');
    else
      process.stdout.write(
        `wrote ${out}: ${result.arch}, ${result.tensors} tensors, ${mib(result.bytes)}, in ${seconds.toFixed(1)} s\n`,
      );
    return 0;
  },
});
