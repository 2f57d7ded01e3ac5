/**
 * Running many seeds, and explaining a failing one: the one-line command that replays it exactly,
 * its event trace, and the shortest prefix of its schedule that still fails (the choices after
 * the prefix are the benign ones: no fault, first in line).
 * Must not import vitest (`npm run sim` imports it).
 */
import { runSeed, type Broken, type SeedReport } from './simulate.js';

export interface SeedsOutcome {
  failures: SeedReport[];
  events: number;
  crashes: number;
  takeovers: number;
  /** How often the watch's invariants were put to the test, summed over the seeds. */
  exercised: Record<string, number>;
}

export async function runSeeds(o: {
  from: number;
  count: number;
  broken?: Broken;
  stopAtFirst?: boolean;
  onProgress?: (done: number) => void;
}): Promise<SeedsOutcome> {
  const out: SeedsOutcome = { failures: [], events: 0, crashes: 0, takeovers: 0, exercised: {} };
  for (let i = 0; i < o.count; i++) {
    const r = await runSeed({ seed: o.from + i, ...(o.broken ? { broken: o.broken } : {}) });
    out.events += r.stats.events;
    out.crashes += r.stats.crashes;
    out.takeovers += r.stats.takeovers;
    for (const [k, n] of Object.entries(r.exercised)) out.exercised[k] = (out.exercised[k] ?? 0) + n;
    if (r.violations.length > 0) {
      out.failures.push(r);
      if (o.stopAtFirst) break;
    }
    o.onProgress?.(i + 1);
  }
  return out;
}

export const replayCommand = (seed: number, broken?: Broken, prefix?: number) =>
  `npm run sim -- --seed ${seed}${prefix !== undefined ? ` --prefix ${prefix}` : ''}${broken ? ` --broken ${broken}` : ''} --trace`;

/** The shortest prefix of the seed's schedule that still fails (binary search, then checked). */
export async function shortestFailingPrefix(
  seed: number,
  choices: number,
  broken?: Broken,
): Promise<{ prefix: number; violations: string[] }> {
  const fails = async (k: number) => (await runSeed({ seed, prefix: k, ...(broken ? { broken } : {}) })).violations;
  let lo = 0;
  let hi = choices; // fails at hi (the whole schedule)
  let best = await fails(hi);
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const v = await fails(mid);
    if (v.length > 0) {
      hi = mid;
      best = v;
    } else lo = mid + 1;
  }
  return { prefix: hi, violations: best };
}

export async function explainFailure(seed: number, broken?: Broken): Promise<string> {
  const r = await runSeed({ seed, ...(broken ? { broken } : {}) });
  const short = await shortestFailingPrefix(seed, r.choices, broken);
  return [
    `[sim] seed ${seed} FAILED: ${r.violations.length} violation(s)`,
    ...r.violations.map((l) => `  VIOLATION ${l}`),
    `  replay: ${replayCommand(seed, broken)}`,
    `  shortest failing prefix: ${short.prefix} of ${r.choices} choices (${short.violations[0] ?? ''}); replay: ${replayCommand(seed, broken, short.prefix)}`,
    '  trace:',
    ...r.trace.map((l) => `    ${l}`),
  ].join('\n');
}
