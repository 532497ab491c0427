import type { CommandSpec } from './options.js';

export interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<CommandSpec>;
}

/**
 * Every command, loaded lazily so that `tandem devinfo` does not pull in the engine.
 * One line per command, in the order `tandem --help` lists them; multi-word names (`bench fabric`) are matched before one-word ones.
 */
export const commands: readonly CommandEntry[] = [
  {
    name: 'help',
    summary: 'list the commands (`tandem help COMMAND`: its options), or write docs/cli.md with --markdown',
    load: async () => (await import('./commands/help.js')).command,
  },
  {
    name: 'demo',
    summary:
      'one random-weight model on one node and across two local nodes: tokens, TTFT, tokens/s, agreement',
    load: async () => (await import('./commands/demo.js')).command,
  },
  {
    name: 'run',
    summary: 'generate text from a GGUF model on this machine (streamed, or --json with TTFT and tokens/s)',
    load: async () => (await import('./commands/run.js')).command,
  },
  {
    name: 'chat',
    summary: 'a conversation with a model in the terminal (or with a running `tandem serve` through --url)',
    load: async () => (await import('./commands/chat.js')).command,
  },
  {
    name: 'serve',
    summary: 'serve a GGUF model over an OpenAI-compatible HTTP API (chat, completions, streaming, /metrics)',
    load: async () => (await import('./commands/serve.js')).command,
  },
  {
    name: 'top',
    summary:
      'the cluster of a running `tandem serve` in the terminal: members, links, tokens/s, queue, placement',
    load: async () => (await import('./commands/top.js')).command,
  },
  {
    name: 'make-model',
    summary: 'write a GGUF model with random weights and a real layout (tests, demos, benchmarks)',
    load: async () => (await import('./commands/make-model.js')).command,
  },
  {
    name: 'train',
    summary: 'train a llama on a text file (AdamW, checkpoints, resume) and write it as a GGUF',
    load: async () => (await import('./commands/train.js')).command,
  },
  {
    name: 'convert',
    summary: 'write a Hugging Face or MLX model folder as a GGUF file',
    load: async () => (await import('./commands/convert.js')).command,
  },
  {
    name: 'node',
    summary: 'run a node agent that holds one shard of a model in distributed runs',
    load: async () => (await import('./commands/node.js')).command,
  },
  {
    name: 'secret',
    summary: 'write a new random cluster secret (a file with mode 0600, or stdout) for every host to share',
    load: async () => (await import('./commands/secret.js')).command,
  },
  {
    name: 'devinfo',
    summary: 'list the fabric providers on this machine and their state (like ibv_devinfo)',
    load: async () => (await import('./commands/devinfo.js')).command,
  },
  {
    name: 'doctor',
    summary: 'check this host (and with a hostfile every host) and say how to fix what is wrong',
    load: async () => (await import('./commands/doctor.js')).command,
  },
  {
    name: 'topology',
    summary: 'show the cluster graph, its class, per-link latency and bandwidth, and a drawing',
    load: async () => (await import('./commands/topology.js')).command,
  },
  {
    name: 'topology plan',
    summary: 'say which Thunderbolt 5 cables to connect for a set of Macs, port by port',
    load: async () => (await import('./commands/topology-plan.js')).command,
  },
  {
    name: 'plan',
    summary: 'predict whether a model fits a set of machines, and its TTFT and tokens/s, before you buy',
    load: async () => (await import('./commands/plan.js')).command,
  },
  {
    name: 'init',
    summary: 'bring a cluster up: doctor, discovery, topology agreement, per-cable addresses, cluster config',
    load: async () => (await import('./commands/init.js')).command,
  },
  {
    name: 'bench fabric',
    summary: 'fabric latency (p50/p99) and bandwidth between two processes over shm or tcp',
    load: async () => (await import('./commands/bench-fabric.js')).command,
  },
  {
    name: 'bench collectives',
    summary: 'collectives time, algbw and busbw per size across N processes (like nccl-tests)',
    load: async () => (await import('./commands/bench-collectives.js')).command,
  },
  {
    name: 'bench model',
    summary: 'prefill/decode tokens/s, TTFT and peak RSS of one model, with llama.cpp beside it',
    load: async () => (await import('./commands/bench-model.js')).command,
  },
  {
    name: 'bench plan',
    summary: "check `tandem plan`'s forecast for this machine against `tandem bench model` on the same file",
    load: async () => (await import('./commands/bench-plan.js')).command,
  },
  {
    name: 'bench train',
    summary: 'the training step on 1..N local data-parallel nodes, against PyTorch CPU in the same run',
    load: async () => (await import('./commands/bench-train.js')).command,
  },
  {
    name: 'bench moe',
    summary: 'expert parallel on local nodes: experts placed statically or by load (hot ones copied)',
    load: async () => (await import('./commands/bench-moe.js')).command,
  },
  {
    name: 'bench serve',
    summary:
      'tandem serve driven over HTTP by 1, 2, 4, 8 streaming clients: TTFT, inter-token latency, tokens/s, llama.cpp beside it',
    load: async () => (await import('./commands/bench-serve.js')).command,
  },
  {
    name: 'bench recover',
    summary:
      'kill one member of a served cluster mid-stream: time to detect, re-place and resume; texts compared',
    load: async () => (await import('./commands/bench-recover.js')).command,
  },
  {
    name: 'bench cluster',
    summary: 'the same prompt on 1 node and on N local nodes: TTFT, tokens/s, comm share, speedup',
    load: async () => (await import('./commands/bench-cluster.js')).command,
  },
  {
    name: 'bench slices',
    summary:
      'the rate a member receives a model as slices from the coordinator, beside the raw tcp link rate',
    load: async () => (await import('./commands/bench-slices.js')).command,
  },
];
