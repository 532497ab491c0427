import { performance } from 'node:perf_hooks';

/**
 * Seconds per call of `fn`, run for `seconds` after 3 untimed calls. On a shared machine wall
 * time mostly measures other people's work, so with one thread the process CPU time is used
 * when smaller (it counts only our own cycles).
 */
export function timeIt(fn: () => void, threads: number, seconds: number): number {
  for (let i = 0; i < 3; i++) fn();
  let iters = 0;
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  let now = start;
  while (now - start < seconds * 1000) {
    fn();
    iters++;
    now = performance.now();
  }
  const cpu = process.cpuUsage(cpu0);
  const wall = (now - start) / 1000 / iters;
  return threads === 1 ? Math.min(wall, (cpu.user + cpu.system) / 1e6 / iters) : wall;
}
