import { availableParallelism, loadavg } from 'node:os';

/**
 * How much slower than a quiet machine this one is right now, for the timeouts of tests that
 * wait on real processes, disks and clocks: 1 on a quiet machine, up to 8 on a loaded one.
 * Measured once per test run (vitest.config.ts sets ACTORLOOP_LOAD_FACTOR for the workers and
 * their children): the larger of the load average per core and the ratio of wall time to CPU
 * time of a short busy loop (CPU contention stretches the one, not the other).
 * `ACTORLOOP_LOAD_FACTOR=3 npm test` sets it by hand.
 * This module must not import vitest: child processes import it through child-util.ts.
 */
export function loadFactor(): number {
  const set = Number(process.env.ACTORLOOP_LOAD_FACTOR);
  if (Number.isFinite(set) && set >= 1) return set;
  return measureLoadFactor();
}

export function measureLoadFactor(): number {
  const perCore = loadavg()[0]! / Math.max(1, availableParallelism());
  const wall0 = performance.now();
  const cpu0 = process.cpuUsage();
  let x = 0;
  while (performance.now() - wall0 < 60) for (let i = 0; i < 10_000; i++) x += Math.sqrt(i ^ x);
  const cpu = process.cpuUsage(cpu0);
  const contention = (performance.now() - wall0) / Math.max(1, (cpu.user + cpu.system) / 1000);
  return Math.round(Math.min(8, Math.max(1, perCore, contention)) * 10) / 10;
}

/** `ms` stretched by the load factor. */
export const scaled = (ms: number): number => Math.round(ms * loadFactor());
