// Power readers, one file per platform behind PowerMeter; openPowerMeter picks this machine's.
import { openPowermetricsMeter } from './powermetrics.js';
import { openRaplMeter } from './rapl.js';
import type { PowerProbe } from './power-meter.js';

export { joulesPerToken, type PowerMeter, type PowerProbe } from './power-meter.js';
export { openRaplMeter, raplDelta, POWERCAP_ROOT } from './rapl.js';
export {
  openPowermetricsMeter,
  parsePowermetrics,
  powermetricsRefusal,
  PowermetricsEnergy,
} from './powermetrics.js';

/** This machine's power meter: RAPL on Linux, powermetrics on macOS, else why there is none. */
export async function openPowerMeter(): Promise<PowerProbe> {
  switch (process.platform) {
    case 'linux':
      return openRaplMeter();
    case 'darwin':
      return openPowermetricsMeter();
    default:
      return {
        reason: `no power reader for ${process.platform} (tandem reads Linux RAPL and macOS powermetrics)`,
      };
  }
}
