/**
 * `npm run sim -- --seeds N [--from S] [--pool-seeds P] [--tree-seeds T] [--broken V]`: one run of
 * every family — agent seeds S … S+N−1 (simulate.ts), then worker-pool seeds S … S+P−1
 * (pool-simulate.ts; P = N/5 by default: a pool seed costs a few agent seeds), then agent-tree
 * seeds S … S+T−1 (tree-simulate.ts; T = N/10 by default) — and prints, as its last line,
 * `N+P+T seeds, V violations` (exit 1 when V > 0).
 * `--broken renew-from-answer` runs the pool family alone, with its bug (pool-simulate.ts);
 * `--pool-seed S [--poll-ms MS] [--trace]` replays one pool seed (every worker polling at MS).
 * `--broken restart-child` runs the tree family alone, with its bug (tree-simulate.ts);
 * `--tree-seed S [--trace]` replays one tree seed.
 * `npm run sim -- --seed S [--prefix K] [--trace]`: replays one seed exactly (the first K choices
 * of its schedule only, benign after), printing its violations and, with --trace, its event trace.
 * `--broken V` runs a deliberately broken variant, to see an invariant catch it: reexecute,
 * blind-retry, fence-blind, stale-head, forget-locks, early-ack, no-idempotency (simulate.ts `Broken`).
 */
import { parseArgs } from 'node:util';
import { explainFailure, runSeeds } from './sim-lib.js';
import { runSeed, type Broken } from './simulate.js';
import { describePoolTotals, explainPoolFailure, noPoolSeeds, runPoolSeeds } from './pool-lib.js';
import { runPoolSeed, type PoolBroken } from './pool-simulate.js';
import { describeTreeTotals, explainTreeFailure, noTreeSeeds, runTreeSeeds } from './tree-lib.js';
import { runTreeSeed, TREE_BROKEN, type TreeBroken } from './tree-simulate.js';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string' },
    from: { type: 'string' },
    seed: { type: 'string' },
    prefix: { type: 'string' },
    broken: { type: 'string' },
    trace: { type: 'boolean' },
    'pool-seeds': { type: 'string' },
    'pool-seed': { type: 'string' },
    'poll-ms': { type: 'string' },
    'tree-seeds': { type: 'string' },
    'tree-seed': { type: 'string' },
  },
});
// the worker-pool family's seeded bug (pool-simulate.ts) runs the pool family alone
const poolBroken = values.broken === 'renew-from-answer' ? (values.broken as PoolBroken) : undefined;
// the tree family's seeded bug (tree-simulate.ts) runs the tree family alone
const treeBroken = values.broken !== undefined && TREE_BROKEN.includes(values.broken) ? (values.broken as TreeBroken) : undefined;
const broken = poolBroken || treeBroken ? undefined : (values.broken as Broken | undefined);

if (values['pool-seed'] !== undefined) {
  const r = await runPoolSeed({
    seed: Number(values['pool-seed']),
    ...(poolBroken ? { broken: poolBroken } : {}),
    ...(values['poll-ms'] !== undefined ? { pollMs: Number(values['poll-ms']) } : {}),
  });
  if (values.trace || r.violations.length > 0) for (const l of r.trace) console.log(l);
  for (const l of r.violations) console.log(`VIOLATION ${l}`);
  console.log(`1 seeds, ${r.violations.length > 0 ? 1 : 0} violations`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else if (values['tree-seed'] !== undefined) {
  const r = await runTreeSeed({ seed: Number(values['tree-seed']), ...(treeBroken ? { broken: treeBroken } : {}) });
  if (values.trace || r.violations.length > 0) for (const l of r.trace) console.log(l);
  for (const l of r.violations) console.log(`VIOLATION ${l}`);
  console.log(`1 seeds, ${r.violations.length > 0 ? 1 : 0} violations`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else if (values.seed !== undefined) {
  const seed = Number(values.seed);
  const r = await runSeed({
    seed,
    ...(values.prefix !== undefined ? { prefix: Number(values.prefix) } : {}),
    ...(broken ? { broken } : {}),
  });
  if (values.trace || r.violations.length > 0) for (const l of r.trace) console.log(l);
  for (const l of r.violations) console.log(`VIOLATION ${l}`);
  console.log(`1 seeds, ${r.violations.length > 0 ? 1 : 0} violations`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else {
  const n = Number(values.seeds ?? 1000);
  const from = Number(values.from ?? 1);
  const t0 = performance.now();
  const agents = poolBroken || treeBroken ? 0 : n;
  const out = await runSeeds({
    from,
    count: agents,
    ...(broken ? { broken } : {}),
    onProgress: (done) => done % 5000 === 0 && console.error(`[sim] ${done} seeds, ${Math.round((performance.now() - t0) / 1000)} s`),
  });
  for (const f of out.failures.slice(0, 3)) console.log(await explainFailure(f.seed, broken));
  if (out.failures.length > 0) console.log(`[sim] failing seeds: ${out.failures.map((f) => f.seed).join(' ')}`);
  console.log(
    `[sim] seeds ${from}..${from + n - 1} in ${Math.round(performance.now() - t0)} ms; ${out.events} events, ${out.crashes} crashes, ${out.takeovers} takeovers`,
  );
  console.log(
    `[sim] exercised: ${Object.entries(out.exercised)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  // the worker-pool family: a seed runs until its pool rests (about 4 s of simulated serving), so
  // a run takes one pool seed per 5 agent seeds unless told
  const poolN = treeBroken ? 0 : Number(values['pool-seeds'] ?? (poolBroken ? n : Math.max(1, Math.ceil(n / 5))));
  const t1 = performance.now();
  const pool =
    broken || treeBroken
      ? noPoolSeeds()
      : await runPoolSeeds({
          from,
          count: poolN,
          ...(poolBroken ? { broken: poolBroken } : {}),
          onProgress: (done) =>
            done % 1000 === 0 && console.error(`[sim] ${done} pool seeds, ${Math.round((performance.now() - t1) / 1000)} s`),
        });
  for (const f of pool.failures.slice(0, 3)) console.log(explainPoolFailure(f, poolBroken));
  if (pool.failures.length > 0) console.log(`[sim] failing pool seeds: ${pool.failures.map((f) => f.seed).join(' ')}`);
  if (!broken && !treeBroken)
    console.log(
      `[sim] worker pools: seeds ${from}..${from + poolN - 1} in ${Math.round(performance.now() - t1)} ms (${Math.round(pool.simulatedMs / 1000)} s simulated); ${describePoolTotals(pool)}`,
    );
  // the agent-tree family: a tree seed runs a root and its child sessions, about three agent seeds' worth
  const treeN = broken || poolBroken ? 0 : Number(values['tree-seeds'] ?? (treeBroken ? n : Math.max(1, Math.ceil(n / 10))));
  const t2 = performance.now();
  const tree =
    treeN === 0
      ? noTreeSeeds()
      : await runTreeSeeds({
          from,
          count: treeN,
          ...(treeBroken ? { broken: treeBroken } : {}),
          onProgress: (done) =>
            done % 1000 === 0 && console.error(`[sim] ${done} tree seeds, ${Math.round((performance.now() - t2) / 1000)} s`),
        });
  for (const f of tree.failures.slice(0, 3)) console.log(explainTreeFailure(f, treeBroken));
  if (tree.failures.length > 0) console.log(`[sim] failing tree seeds: ${tree.failures.map((f) => f.seed).join(' ')}`);
  if (treeN > 0)
    console.log(
      `[sim] agent trees: seeds ${from}..${from + treeN - 1} in ${Math.round(performance.now() - t2)} ms; ${describeTreeTotals(tree)}`,
    );
  const seeds = agents + (broken || treeBroken ? 0 : poolN) + treeN;
  const violations = out.failures.length + pool.failures.length + tree.failures.length;
  console.log(`${seeds} seeds, ${violations} violations`);
  process.exitCode = violations > 0 ? 1 : 0;
}
