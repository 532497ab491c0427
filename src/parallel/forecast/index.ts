export { modelCatalog, findModelShape } from './model-catalog.js';
export { paramCounts, type ModelShape } from './model-shape.js';
export { machineCatalog, findMachineSpec, type MachineSpec } from './machine-catalog.js';
export {
  parseForecastMachines,
  maxForecastMachines,
  type Calibration,
  type PrefillShape,
} from './machine-list.js';
export { linkCatalog, findLink, readLinkFile, type LinkSpec } from './links.js';
export { engines, engineIds, findEngine, type EngineId, type EngineModel } from './engines.js';
export { quantBits, parseQuant, type QuantName } from './quant.js';
export { bytesFromShape, bytesFromGguf, prefillShapeOf, type ModelBytes } from './model-bytes.js';
export {
  forecastSplit,
  forecastAuto,
  candidateSplits,
  machineRates,
  allReduceMs,
  type Forecast,
  type ForecastInput,
  type ForecastMachine,
  type ForecastParallel,
} from './predict.js';
export { forecastError } from './error-band.js';
export { sharedHostMachines, measuredLink, pipelinePrefillMs } from './shared-host.js';
export { publishedCases, type PublishedCase } from './published-cases.js';
export { validateForecasts, validationSummary, type ValidationRow } from './validate.js';
