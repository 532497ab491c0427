import type { EngineModel } from './engines.js';

/**
 * The stated relative error of a forecast, from its validation (docs/plan.md): a validated
 * engine on one machine was within 25% on every published case checked; clusters add the
 * link and the engines' collective paths, checked on fewer cases; an engine with no
 * measurement behind it gets the widest band.
 */
export function forecastError(engine: EngineModel, machines: number): number {
  if (!engine.validated) return 0.5;
  return machines === 1 ? 0.25 : 0.4;
}
