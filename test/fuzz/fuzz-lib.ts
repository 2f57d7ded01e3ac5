import fc from 'fast-check';
import { expect } from 'vitest';
import { ActorloopError, ExecutionResult, type EventStore } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect } from '../helpers/drafts.js';

/**
 * The fuzz suite's settings and checks. `npm test` runs each property a few seconds at most;
 * `npm run fuzz -- --runs N` (test/fuzz/run.ts) runs N cases each. A failure prints fast-check's
 * seed and path; replay it with `npm run fuzz -- --seed S --path P`.
 */
export const FUZZ = {
  runs: Number(process.env.FUZZ_RUNS ?? 40),
  /**
   * In `npm test`, a property starts no new case after this long (it has run at least one; the case
   * running then is never cut short: each is bounded by `caseTimeoutMs`); a long run has no limit.
   */
  timeLimitMs: process.env.FUZZ_RUNS ? undefined : Number(process.env.FUZZ_TIME_MS ?? 4000),
  seed: process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : undefined,
  path: process.env.FUZZ_PATH,
  /** Every case must settle within this (a hang fails the case, with its seed). */
  caseTimeoutMs: Number(process.env.FUZZ_CASE_MS ?? 8000),
};

/** Vitest's timeout for one property. */
export const propertyTimeout = () => (FUZZ.timeLimitMs === undefined ? 0 : FUZZ.timeLimitMs + FUZZ.caseTimeoutMs * 2 + 10_000);

/**
 * Runs an async property with the suite's settings and prints what ran: `[fuzz] <name>: <cases>
 * cases in <ms> ms (seed <seed>)`. A failing case throws with its seed, path and counterexample.
 */
export async function fuzz<T>(name: string, arb: fc.Arbitrary<T>, check: (value: T) => Promise<void>): Promise<void> {
  let cases = 0;
  const t0 = performance.now();
  const seed = FUZZ.seed ?? Date.now() ^ (Math.random() * 0x7fffffff);
  const deadline = FUZZ.timeLimitMs === undefined ? Number.POSITIVE_INFINITY : t0 + FUZZ.timeLimitMs;
  const prop = fc.asyncProperty(arb, async (v) => {
    // Past the time limit the remaining generated values pass unrun (not counted in `cases`).
    // fast-check's interruptAfterTimeLimit would instead abandon the running case mid-way, and
    // fail the property when a busy host made even the first case outlast the limit.
    if (cases > 0 && performance.now() > deadline) return;
    cases++;
    await check(v);
  });
  try {
    await fc.assert(prop, {
      numRuns: FUZZ.runs,
      seed,
      ...(FUZZ.path ? { path: FUZZ.path } : {}),
      endOnFailure: true, // a hang repeated while shrinking would take minutes: report the first case
    });
  } catch (e) {
    console.error(
      `[fuzz] ${name}: FAILED after ${cases} cases; replay with: npm run fuzz -- --seed ${seed}${FUZZ.path ? ` --path ${FUZZ.path}` : ''}`,
    );
    throw e;
  }
  console.log(`[fuzz] ${name}: ${cases} cases in ${Math.round(performance.now() - t0)} ms (seed ${seed})`);
}

/** `p`, or a rejection naming `what` once `ms` passed: a hang is a failure, never a stuck run. */
export function bounded<T>(p: Promise<T>, what: string, ms = FUZZ.caseTimeoutMs): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new Error(`HANG: ${what} did not settle within ${ms} ms`)), ms);
    }),
  ]);
}

/**
 * Only typed errors or settled results: `p` resolves with a valid ExecutionResult (or `ok`
 * accepts it), or rejects with one of actorloop's exported error classes.
 */
export async function settlesTyped<T>(p: Promise<T>, what: string): Promise<{ value?: T; error?: ActorloopError }> {
  try {
    return { value: await bounded(p, what) };
  } catch (e) {
    if (e instanceof Error && e.message.startsWith('HANG:')) throw e;
    if (!(e instanceof ActorloopError))
      throw new Error(`${what} threw an untyped ${(e as Error)?.name ?? typeof e}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    return { error: e };
  }
}

export function expectResult(r: unknown): void {
  const parsed = ExecutionResult.safeParse(r);
  expect(parsed.success, parsed.success ? '' : `not an ExecutionResult: ${JSON.stringify(parsed.error.issues[0])}`).toBe(true);
}

/**
 * The log's invariants: seq contiguous from 1; event ids unique; every call (of a step) has at
 * most one tool/result; every attempt writes at most one run/end; a run settles (a run/end that is
 * not suspended, detached or fenced) at most once, and exactly once when `settledRuns` names it.
 */
export async function expectLogInvariants(
  store: EventStore,
  sessionId: string,
  settledRuns: readonly string[] = [],
): Promise<EventRecord[]> {
  const log = await collect(store.readEvents(sessionId));
  log.forEach((e, i) => expect(e.seq, `seq at index ${i}`).toBe(i + 1));
  expect(new Set(log.map((e) => e.eventId)).size).toBe(log.length);
  // a model may reuse a call id in a later step (call_0 in every message): counted per step
  const results = new Map<string, number>();
  for (const e of log) {
    if (e.type !== 'tool/result') continue;
    const k = `turn ${e.turn} step ${e.step} call ${JSON.stringify(e.payload.callId)}`;
    results.set(k, (results.get(k) ?? 0) + 1);
  }
  for (const [k, n] of results) expect(n, `results of ${k}`).toBe(1);
  const ends = new Map<string, number>();
  const attemptEnds = new Map<string, number>();
  for (const e of log.filter((x) => x.type === 'run/end')) {
    const p = e.payload as { runId: string; attemptId: string; status: string };
    attemptEnds.set(`${p.runId}\u0000${p.attemptId}`, (attemptEnds.get(`${p.runId}\u0000${p.attemptId}`) ?? 0) + 1);
    if (!['suspended', 'detached', 'fenced'].includes(p.status)) ends.set(p.runId, (ends.get(p.runId) ?? 0) + 1);
  }
  for (const [k, n] of attemptEnds) expect(n, `run/end of attempt ${k}`).toBe(1);
  for (const [runId, n] of ends) expect(n, `settling run/end of run ${runId}`).toBe(1);
  for (const runId of settledRuns) expect(ends.get(runId), `settling run/end of run ${runId}`).toBe(1);
  return log;
}

/** Call ids, tool names and keys a hostile model might send: prototype names, odd characters, repeats. */
export const hostileKey = fc.oneof(
  fc.constantFrom('__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', '__defineGetter__'),
  fc.constantFrom('echo', 'exclusive_op', 'askUser', 'call:echo', '', ' ', 'a/b', '\u0000', 'é', '😀', 'x'.repeat(300)),
  fc.string({ maxLength: 12 }),
);
