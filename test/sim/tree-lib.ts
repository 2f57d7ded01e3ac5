/**
 * Running many seeds of the tree family (tree-simulate.ts), summing what they exercised, and
 * explaining a failing one, for `npm run sim` (run.ts) and `npm test` (tree-simulation.test.ts).
 * Must not import vitest.
 */
import type { TreeExercised } from './tree-invariants.js';
import { runTreeSeed, type TreeBroken, type TreeSeedReport } from './tree-simulate.js';

export interface TreeSeedsOutcome {
  failures: TreeSeedReport[];
  sessions: number;
  events: number;
  crashes: number;
  takeovers: number;
  exercised: TreeExercised;
}

export const noTreeSeeds = (): TreeSeedsOutcome => ({
  failures: [],
  sessions: 0,
  events: 0,
  crashes: 0,
  takeovers: 0,
  exercised: {
    beforeChild: 0,
    childRunning: 0,
    childDone: 0,
    afterCommit: 0,
    recoveredAgentCalls: 0,
    answersTakenFromLog: 0,
    childrenContinued: 0,
    childUncertainReported: 0,
    childrenCancelledWithRoot: 0,
    sideEffects: 0,
  },
});

export async function runTreeSeeds(o: {
  from: number;
  count: number;
  broken?: TreeBroken;
  stopAtFirst?: boolean;
  onProgress?: (done: number) => void;
}): Promise<TreeSeedsOutcome> {
  const out = noTreeSeeds();
  for (let i = 0; i < o.count; i++) {
    const r = await runTreeSeed({ seed: o.from + i, ...(o.broken ? { broken: o.broken } : {}) });
    out.sessions += r.stats.sessions;
    out.events += r.stats.events;
    out.crashes += r.stats.crashes;
    out.takeovers += r.stats.takeovers;
    for (const k of Object.keys(out.exercised) as (keyof TreeExercised)[]) out.exercised[k] += r.exercised[k];
    o.onProgress?.(i + 1);
    if (r.violations.length > 0) {
      out.failures.push(r);
      if (o.stopAtFirst) break;
    }
  }
  return out;
}

/** The totals as `npm run sim` prints them. */
export const describeTreeTotals = (t: TreeSeedsOutcome): string => {
  const e = t.exercised;
  return (
    `${t.sessions} sessions, ${t.events} events, ${t.crashes} crashes, ${t.takeovers} takeovers; ` +
    `crashes or takeovers at an agent call: ${e.beforeChild} before its child opened, ${e.childRunning} while it ran, ` +
    `${e.childDone} after it settled (before the parent committed), ${e.afterCommit} after the parent committed; ` +
    `${e.recoveredAgentCalls} open agent calls recovered, ${e.answersTakenFromLog} answers taken from a child's log, ` +
    `${e.childrenContinued} child runs continued, ${e.childUncertainReported} child calls reported uncertain to the parent, ` +
    `${e.childrenCancelledWithRoot} open child runs cancelled with the root, ` +
    `${e.sideEffects} exclusive side effects`
  );
};

export const treeReplayCommand = (seed: number, broken?: TreeBroken) =>
  `npm run sim -- --tree-seed ${seed}${broken ? ` --broken ${broken}` : ''} --trace`;

/** A failing tree seed: its violations, the command that replays it, its trace. */
export const explainTreeFailure = (r: TreeSeedReport, broken?: TreeBroken): string =>
  [
    `[sim] tree seed ${r.seed} FAILED: ${r.violations.length} violation(s)`,
    ...r.violations.map((v) => `  VIOLATION ${v}`),
    `  replay: ${treeReplayCommand(r.seed, broken)}`,
    '  trace:',
    ...r.trace.map((l) => `    ${l}`),
  ].join('\n');
