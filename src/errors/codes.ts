import type { ErrorCategory } from './category.js';
import { coreCodes } from './codes-core.js';
import { kernelsCodes } from './codes-kernels.js';
import { engineFormatCodes } from './codes-engine-format.js';
import { fabricCodes } from './codes-fabric.js';
import { collectivesCodes } from './codes-collectives.js';
import { topologyCodes } from './codes-topology.js';
import { engineCodes } from './codes-engine.js';
import { parallelCodes } from './codes-parallel.js';
import { clusterCodes } from './codes-cluster.js';
import { apiCodes } from './codes-api.js';
import { cliCodes } from './codes-cli.js';

/**
 * Every error code tandem raises, with its category. Each layer keeps its own table in
 * `codes-<layer>.ts`; codes are unique across tables (a test checks).
 */
export const errorCodes = {
  ...coreCodes,
  ...kernelsCodes,
  ...fabricCodes,
  ...collectivesCodes,
  ...topologyCodes,
  ...engineFormatCodes,
  ...engineCodes,
  ...parallelCodes,
  ...clusterCodes,
  ...apiCodes,
  ...cliCodes,
} as const satisfies Record<string, ErrorCategory>;

export type ErrorCode = keyof typeof errorCodes;

export const codeTables: Readonly<Record<string, Readonly<Record<string, ErrorCategory>>>> = {
  core: coreCodes,
  kernels: kernelsCodes,
  fabric: fabricCodes,
  collectives: collectivesCodes,
  topology: topologyCodes,
  engineFormat: engineFormatCodes,
  engine: engineCodes,
  parallel: parallelCodes,
  cluster: clusterCodes,
  api: apiCodes,
  cli: cliCodes,
};
