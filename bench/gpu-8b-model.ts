// The 8B-shaped Q4_K_M model of bench/gpu-device.sh (GPU_8B=1): Llama 3 8B's shape, random
// weights, about 4.9 GB, written to the path given (default /tmp/8b-q4_k_m.gguf).
import { makeModel } from '../src/engine/format/make-model.js';

await makeModel(process.argv[2] ?? '/tmp/8b-q4_k_m.gguf', {
  arch: 'llama',
  type: 'q4_k_m',
  threads: 16,
  // (the expert fields are the shape type's; a llama model has no experts and ignores them)
  shape: {
    layers: 32,
    embd: 4096,
    ff: 14336,
    heads: 32,
    kvHeads: 8,
    headDim: 128,
    vocab: 128256,
    context: 8192,
    experts: 8,
    expertsUsed: 2,
    expertFf: 1536,
    sharedFf: 1536,
  },
});
