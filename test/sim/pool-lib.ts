/**
 * Running many worker-pool seeds (pool-simulate.ts) and summing what they exercised, for
 * `npm run sim` (run.ts) and `npm test` (simulation.test.ts).
 */
import { runPoolSeed, type PoolBroken, type PoolSeedResult } from './pool-simulate.js';

export interface PoolSeedsOutcome {
  failures: PoolSeedResult[];
  pauses: number;
  crashes: number;
  takeovers: number;
  leaseLosses: number;
}

export async function runPoolSeeds(o: {
  from: number;
  count: number;
  broken?: PoolBroken;
  stopAtFirst?: boolean;
}): Promise<PoolSeedsOutcome> {
  const out: PoolSeedsOutcome = { failures: [], pauses: 0, crashes: 0, takeovers: 0, leaseLosses: 0 };
  for (let i = 0; i < o.count; i++) {
    const r = await runPoolSeed({ seed: o.from + i, ...(o.broken ? { broken: o.broken } : {}) });
    out.pauses += r.stats.pauses;
    out.crashes += r.stats.crashes;
    out.takeovers += r.stats.takeovers;
    out.leaseLosses += r.stats.leaseLosses;
    if (r.violations.length > 0) {
      out.failures.push(r);
      if (o.stopAtFirst) break;
    }
  }
  return out;
}

/** A failing pool seed, its violations and the command that replays it with its trace. */
export const explainPoolFailure = (r: PoolSeedResult, broken?: PoolBroken): string =>
  [
    `pool seed ${r.seed}: ${r.violations.length} violation(s)`,
    ...r.violations.map((v) => `  ${v}`),
    `replay: npm run sim -- --pool-seed ${r.seed}${broken ? ` --broken ${broken}` : ''} --trace`,
  ].join('\n');
