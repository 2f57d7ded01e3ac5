/**
 * `npm run sim -- --seeds N [--from S] [--broken V]`: runs seeds S … S+N−1 and
 * prints, as its last line, `N seeds, V violations` (exit 1 when V > 0).
 * `npm run sim -- --seed S [--prefix K] [--trace]`: replays one seed exactly (the first K choices
 * of its schedule only, benign after), printing its violations and, with --trace, its event trace.
 * `--broken V` runs a deliberately broken variant, to see an invariant catch it: reexecute,
 * blind-retry, fence-blind, stale-head, forget-locks, early-ack, no-idempotency (simulate.ts `Broken`).
 */
import { parseArgs } from 'node:util';
import { explainFailure, runSeeds } from './sim-lib.js';
import { runSeed, type Broken } from './simulate.js';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string' },
    from: { type: 'string' },
    seed: { type: 'string' },
    prefix: { type: 'string' },
    broken: { type: 'string' },
    trace: { type: 'boolean' },
  },
});
const broken = values.broken as Broken | undefined;

if (values.seed !== undefined) {
  const seed = Number(values.seed);
  const r = await runSeed({ seed, ...(values.prefix !== undefined ? { prefix: Number(values.prefix) } : {}), ...(broken ? { broken } : {}) });
  if (values.trace || r.violations.length > 0) for (const l of r.trace) console.log(l);
  for (const l of r.violations) console.log(`VIOLATION ${l}`);
  console.log(`1 seeds, ${r.violations.length > 0 ? 1 : 0} violations`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else {
  const n = Number(values.seeds ?? 1000);
  const from = Number(values.from ?? 1);
  const t0 = performance.now();
  const out = await runSeeds({ from, count: n, ...(broken ? { broken } : {}), onProgress: (done) => done % 5000 === 0 && console.error(`[sim] ${done} seeds, ${Math.round((performance.now() - t0) / 1000)} s`) });
  for (const f of out.failures.slice(0, 3)) console.log(await explainFailure(f.seed, broken));
  if (out.failures.length > 0) console.log(`[sim] failing seeds: ${out.failures.map((f) => f.seed).join(' ')}`);
  console.log(`[sim] seeds ${from}..${from + n - 1} in ${Math.round(performance.now() - t0)} ms; ${out.events} events, ${out.crashes} crashes, ${out.takeovers} takeovers`);
  console.log(`[sim] exercised: ${Object.entries(out.exercised).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  console.log(`${n} seeds, ${out.failures.length} violations`);
  process.exitCode = out.failures.length > 0 ? 1 : 0;
}
