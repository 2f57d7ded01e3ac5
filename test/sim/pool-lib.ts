/**
 * Running many worker-pool seeds (pool-simulate.ts) and summing what they exercised, for
 * `npm run sim` (run.ts) and `npm test` (pool-simulation.test.ts).
 */
import { runPoolSeed, type PoolBroken, type PoolSeedResult, type PoolStats } from './pool-simulate.js';

/** What the seeds exercised, summed (the counts of PoolStats that add up). */
export type PoolTotals = Omit<PoolStats, 'sessions' | 'workers' | 'simulatedMs'>;

export interface PoolSeedsOutcome extends PoolTotals {
  failures: PoolSeedResult[];
  /** Simulated time, summed over the seeds. */
  simulatedMs: number;
}

const TOTALS = ['skewed', 'pauses', 'longPauses', 'crashes', 'closes', 'lostWakeups', 'takeovers', 'leaseLosses'] as const;

export const noPoolSeeds = (): PoolSeedsOutcome => ({
  failures: [],
  simulatedMs: 0,
  ...(Object.fromEntries(TOTALS.map((k) => [k, 0])) as PoolTotals),
});

export async function runPoolSeeds(o: {
  from: number;
  count: number;
  broken?: PoolBroken;
  stopAtFirst?: boolean;
  onProgress?: (done: number) => void;
}): Promise<PoolSeedsOutcome> {
  const out = noPoolSeeds();
  for (let i = 0; i < o.count; i++) {
    const r = await runPoolSeed({ seed: o.from + i, ...(o.broken ? { broken: o.broken } : {}) });
    for (const k of TOTALS) out[k] += r.stats[k];
    out.simulatedMs += r.stats.simulatedMs;
    o.onProgress?.(i + 1);
    if (r.violations.length > 0) {
      out.failures.push(r);
      if (o.stopAtFirst) break;
    }
  }
  return out;
}

/** The totals as `npm run sim` prints them. */
export const describePoolTotals = (t: PoolTotals): string =>
  `${t.pauses} pauses (${t.longPauses} longer than the lease), ${t.crashes} crashes, ${t.closes} runtimes closed while serving, ${t.takeovers} takeovers, ${t.leaseLosses} leases lost, ${t.lostWakeups} wake-ups lost, ${t.skewed} workers with a skewed clock`;

/** A failing pool seed, its violations and the command that replays it with its trace. */
export const explainPoolFailure = (r: PoolSeedResult, broken?: PoolBroken): string =>
  [
    `pool seed ${r.seed}: ${r.violations.length} violation(s)`,
    ...r.violations.map((v) => `  ${v}`),
    `replay: npm run sim -- --pool-seed ${r.seed}${broken ? ` --broken ${broken}` : ''} --trace`,
  ].join('\n');
