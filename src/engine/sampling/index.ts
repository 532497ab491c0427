export { Sampler, greedyPick, type SamplerOptions, type Distribution } from './sampler.js';
export { Rng } from './rng.js';
