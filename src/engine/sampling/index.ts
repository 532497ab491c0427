export { Sampler, greedyPick, type SamplerOptions, type Distribution } from './sampler.js';
export { Rng } from './rng.js';
export { compileJsonSchema, anyJson, anyJsonObject, type JsonNode } from './json-schema.js';
export { JsonConstraint, type TokenConstraint } from './token-constraint.js';
