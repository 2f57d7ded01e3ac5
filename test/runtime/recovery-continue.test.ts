import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { EventDraft, EventRecord } from '../../src/contracts/events.js';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type RuntimeOptions } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { hookedStore, lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { logOf, sleep, storeWithAppend } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * continue after a crash: what the recovery outcome reports is what the continue does, and a
 * committed answer or a spent budget survives the crash. A "crash" is simulated in-process: the
 * first runtime's store hangs forever on a chosen append (before it is written: the commit never
 * happened; or after it: the commit is durable and the process "dies" before acting on it), the
 * first runtime is abandoned (never closed), and a fresh runtime opens the same LMDB path.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const never = () => new Promise<never>(() => {});

/** A temp LMDB path; runtimes made with `rt` are closed after the test (abandoned ones are not). */
function lmdbPath() {
  const base = lmdbPathFor(cleanups);
  const dir = { path: base.path };
  return {
    ...base,
    /** A runtime that "dies" at the first append for which `when(drafts)` holds (before or after it is durable). */
    dying(options: Omit<RuntimeOptions, 'store'>, when: (drafts: EventDraft[]) => boolean, point: 'before' | 'after', died?: () => void) {
      const inner = lmdbStore({ path: dir.path });
      let dead = false;
      const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
        if (dead) return never();
        if (when(drafts as EventDraft[])) {
          dead = true;
          if (point === 'after') await inner.append(id, epoch, seq, drafts);
          died?.();
          return never();
        }
        return inner.append(id, epoch, seq, drafts);
      });
      return createRuntime({ ...options, store });
    },
  };
}

const has = (type: string) => (drafts: EventDraft[]) => drafts.some((d) => d.type === type);

async function waitFor<T>(f: () => Promise<T | undefined> | T | undefined, ms = 5000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error('waitFor timed out');
    await sleep(10);
  }
}

const finishTool = () =>
  defineTool({
    name: 'finish',
    description: '',
    parameters: z.object({}),
    execute: () => ({ kind: 'completed' as const, content: 'all done by tool', concludesTurn: true }),
  });

/** Waits until the LMDB log at `path` holds an event for which `pred` holds. */
async function logHas(path: string, pred: (e: EventRecord) => boolean): Promise<void> {
  const reader = lmdbStore({ path });
  try {
    await waitFor(async () => (await logOf(reader, 's')).some(pred));
  } finally {
    await reader.close();
  }
}

describe('a concludesTurn answer committed, then a crash before final/message', () => {
  // DESIGN §4 item 5: "`completed.concludesTurn` ends the run after this batch with that content as
  // the final answer". A crash after the results commit (tool/result with concludesTurn + step/end)
  // and before final/message: `continue` (startStep) asks the model for a new step instead of
  // finalizing with the tool's content — an extra model call and a different final answer.
  it('after a crash between a concludesTurn result commit and final/message, continue finalizes with the tool content, calling no model', async () => {
    const db = lmdbPath();
    const finish = defineTool({
      name: 'finish',
      description: '',
      parameters: z.object({}),
      execute: () => ({ kind: 'completed' as const, content: 'all done by tool', concludesTurn: true }),
    });
    const dies = new Promise<void>(() => {});
    const store1 = hookedStore(lmdbStore({ path: db.path }), async (drafts) => {
      if (drafts.some((d) => d.type === 'final/message')) await dies; // the process dies here
    });
    const rt1 = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'finish', arguments: {} }] }]),
      tools: [finish],
      store: store1,
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    const reader = lmdbStore({ path: db.path });
    for (let i = 0; i < 100 && !(await logOf(reader, 's')).some((e) => e.type === 'step/end'); i++) await sleep(20);
    await reader.close();
    const model2 = scriptedModel(['model answer after crash']);
    const rt2 = db.rt({ model: model2, tools: [finish] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r' }]);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'all done by tool' });
    expect(model2.requests).toHaveLength(0);
  });

  // guarantees.md, "Recovery: each crash point": "after a concludesTurn result's commit, before
  // final/message | ... the concluded content is the run's answer (DESIGN §4 item 5) | continue
  // finalizes with it, calling no model". DESIGN §4 item 10: the stop lets the run "finish the tool
  // round in progress". Without the crash the same run ends `succeeded` with the tool's answer (the
  // concludesTurn branch is taken before the stop); after the crash, the continue's startRun.done
  // checks the stop before `concluded` and ends `stopped`: the committed answer is never finalized
  // nor delivered, and nothing reports it.
  it('a stop accepted while the concluded answer was being verified: continue still finalizes and delivers the concluded answer', async () => {
    const db = lmdbPath();
    const verifying = deferred();
    const gate = deferred();
    const rt1 = db.dying(
      {
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'finish', arguments: {} }] }]),
        tools: [finishTool()],
        finalVerifier: async () => (verifying.resolve(), await gate.promise, undefined),
      },
      has('final/message'),
      'before',
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await verifying.promise;
    await s1.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s1.sessionInstanceId,
      interactionId: 'r',
      expectedRunEpoch: 1,
      idempotencyKey: 'k',
    });
    gate.resolve();
    await sleep(50); // the process dies at the final/message commit
    const model2 = scriptedModel(['model answer after crash']);
    const delivered: string[] = [];
    const rt2 = db.rt({ model: model2, tools: [finishTool()], delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', stopAccepted: true }]);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'all done by tool' });
    expect(delivered).toEqual(['all done by tool']);
    expect(model2.requests).toHaveLength(0);
  });

  // Same crash point with a budget the concluding step used up (maxToolCalls 1, one call). Without
  // a crash: `succeeded` with the tool's answer (as test/actors/final-delivery.test.ts checks). After the
  // crash the continue inherits the spent budget and ends `budget_exhausted` before looking at the
  // concluded answer: the final answer is lost. guarantees.md only lets an inherited spent budget
  // stop a *model call* ("ends budget_exhausted before any model call"); finalizing calls none.
  it('maxToolCalls used up by the concluding call: continue finalizes the concluded answer (not budget_exhausted)', async () => {
    const db = lmdbPath();
    const rt1 = db.dying(
      {
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'finish', arguments: {} }] }]),
        tools: [finishTool()],
        budget: { maxToolCalls: 1 },
      },
      has('final/message'),
      'before',
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await logHas(db.path, (e) => e.type === 'step/end');
    await sleep(30);
    const model2 = scriptedModel(['model answer after crash']);
    const delivered: string[] = [];
    const rt2 = db.rt({
      model: model2,
      tools: [finishTool()],
      budget: { maxToolCalls: 1 },
      delivery: { deliver: async (f) => void delivered.push(f.content) },
    });
    const s2 = await rt2.openSession('s');
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'all done by tool' });
    expect(delivered).toEqual(['all done by tool']);
    expect(model2.requests).toHaveLength(0);
  });

  // Same crash point; meanwhile the user submitted a follow-up (input/accepted is written with
  // step 0 inside the open run's event range). foldRunEvents drops the pending `concluding` answer
  // on any event of another step, so the reopened session no longer sees it: `continue` calls the
  // model again and delivers a different answer (the tool's answer is silently lost; the extra model
  // call is exactly what the crash-point table says does not happen). The same happens for any
  // session-level event written there (a steer input, setStateContext, releaseResources).
  it('a follow-up submitted while the concluded answer was being verified: continue still finalizes with the tool content, calling no model', async () => {
    const db = lmdbPath();
    const verifying = deferred();
    const gate = deferred();
    const rt1 = db.dying(
      {
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'finish', arguments: {} }] }]),
        tools: [finishTool()],
        finalVerifier: async () => (verifying.resolve(), await gate.promise, undefined),
      },
      has('final/message'),
      'before',
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await verifying.promise;
    await s1.submitInput({ inputId: 'f1', message: 'and then?', mode: 'follow_up' });
    gate.resolve();
    await sleep(50); // the process dies at the final/message commit
    const model2 = scriptedModel(['model answer after crash', 'follow-up answer']);
    const rt2 = db.rt({ model: model2, tools: [finishTool()] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r' }]);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'all done by tool' });
    await s2.waitForIdle();
    expect(model2.requests).toHaveLength(1); // only the follow-up run's model call
  });
});

describe('what recovery reports is what continue does', () => {
  // DESIGN §5 / guarantees.md: "recovery.uncertainToolCalls names each call and its resolution
  // (rerun, reconcile, uncertain-hanging)" and "A parallel call naming a resource that an uncertain
  // call keeps locked is skipped instead of run again". Batch [look(a) parallel, pay exclusive on
  // 'card', look(card) parallel], crash while pay runs. The recovery outcome says p2 will be
  // `rerun`; the continue actually records it `skipped` (pay's uncertain-hanging lock on 'card'),
  // so the reported resolution is wrong for that call.
  it('a parallel call that continue skips (its resource is locked by an uncertain call of the batch) is reported skipped, not rerun', async () => {
    const db = lmdbPath();
    const started = deferred();
    const mk = (hangPay: boolean) => [
      defineTool({
        name: 'look',
        description: '',
        mode: 'parallel',
        parameters: z.object({ k: z.string() }),
        resources: (a: { k: string }) => [a.k],
        execute: () => 'seen',
      }),
      defineTool({
        name: 'pay',
        description: '',
        parameters: z.object({}),
        resources: ['card'],
        execute: () => (hangPay ? (started.resolve(), never()) : 'paid'),
      }),
    ];
    const calls = [
      { id: 'p1', name: 'look', arguments: { k: 'a' } },
      { id: 'e1', name: 'pay', arguments: {} },
      { id: 'p2', name: 'look', arguments: { k: 'card' } },
    ];
    const rt1 = db.rt({ model: scriptedModel([{ toolCalls: calls }]), tools: mk(true) });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    const rt2 = db.rt({ model: scriptedModel(['ok']), tools: mk(false) });
    const s2 = await rt2.openSession('s');
    const reported = Object.fromEntries(s2.recovery.uncertainToolCalls.map((c) => [c.callId, c.resolution]));
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'succeeded' });
    const p2 = (await logOf(rt2.store, 's')).find((e) => e.type === 'tool/result' && e.payload.callId === 'p2')!;
    expect(p2.payload.outcome).toMatchObject({ kind: 'skipped' });
    expect(reported.p2).not.toBe('rerun');
  });

  // guarantees.md, Budgets: "the result's usage, toolCalls, cost and recoveries are the run's".
  // A final committed, the process dies during delivery; openSession settles the run (run/end
  // delivery_unknown). That recorded result — what executing the attempt again returns — says the
  // run used 0 tokens and carries no toolCalls/cost, although its two model calls (220 in / 12 out)
  // and its tool call are in the log.
  it('the run/end written at open for a final interrupted in delivery carries the run usage and tool calls', async () => {
    const db = lmdbPath();
    const entered = deferred();
    const look = defineTool({ name: 'look', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'seen' });
    const rt1 = db.rt({
      model: scriptedModel([
        { toolCalls: [{ id: 'c1', name: 'look', arguments: {} }], usage: { inputTokens: 100, outputTokens: 7 } },
        { text: 'the answer', usage: { inputTokens: 120, outputTokens: 5 } },
      ]),
      tools: [look],
      delivery: { deliver: () => (entered.resolve(), never()) },
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'q' });
    await entered.promise;
    const rt2 = db.rt({ model: scriptedModel([]), tools: [look], delivery: { deliver: async () => {} } });
    const s2 = await rt2.openSession('s');
    const r = await s2.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'q' });
    expect(r).toMatchObject({ status: 'delivery_unknown', usage: { inputTokens: 220, outputTokens: 12 }, toolCalls: 1 });
  });

  // guarantees.md: `releaseResources(keys)` "writes resources/released: the locks left by uncertain
  // calls are freed, here and after restarts"; recovery.activeResourceLocks names "the resources
  // those uncertain-hanging resolutions will lock". The app sees 'card' there, checks with the
  // idempotency key that the charge never happened and releases it — then `continue` records the
  // call uncertain-hanging and locks 'card' again; the release is silently undone and the next
  // charge is blocked. (Lower confidence: the docs do not say whether a release may precede the lock.)
  it('a lock released after reopening, before continue, stays released', async () => {
    const db = lmdbPath();
    const started = deferred();
    const charge1 = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({}),
      resources: ['card'],
      execute: () => (started.resolve(), never()),
    });
    const charge = defineTool({ name: 'charge', description: '', parameters: z.object({}), resources: ['card'], execute: () => 'charged' });
    const rt1 = db.rt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'charge', arguments: {} }] }]), tools: [charge1] });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    const rt2 = db.rt({ model: scriptedModel(['unsure']), tools: [charge] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.activeResourceLocks).toEqual(['card']);
    await s2.releaseResources(['card']);
    await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(s2.activeResourceLocks).toEqual([]);
  });
});

describe('continue after a crash', () => {
  it('continue after a crash counts a re-run parallel call once against maxToolCalls', async () => {
    const dir = (await import('../helpers/tmp.js')).tempDir();
    cleanups.push(dir.cleanup);
    let hang = true;
    const fetchTool = defineTool({
      name: 'fetch',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (hang ? new Promise<string>(() => {}) : 'body'),
    });
    const a = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'f1', name: 'fetch', arguments: {} }] }]),
      tools: [fetchTool],
      budget: { maxToolCalls: 2 },
    });
    const s1 = await a.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    while (!(await logOf(a.store, 's')).some((e) => e.type === 'tool/call')) await sleep(5);
    await a.close(); // the process "dies" with the parallel call announced and unanswered
    hang = false;
    const b = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel(['done']),
      tools: [fetchTool],
      budget: { maxToolCalls: 2 },
    });
    cleanups.unshift(() => b.close());
    const s2 = await b.openSession('s');
    expect(s2.recovery.interruptedRuns.length).toBe(1);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    // the model asked for one call; the run without a crash uses 1 of 2 and succeeds
    expect({ status: r.status, toolCalls: r.toolCalls }).toEqual({ status: 'succeeded', toolCalls: 1 });
  });

  it("re-executing an interrupted attempt after the run settled through a continue returns the run's settled result", async () => {
    const dir = tempDir();
    const hangingModel = { modelId: 'm', call: () => new Promise<never>(() => {}) };
    const rt1 = createRuntime({ model: hangingModel, store: lmdbStore({ path: dir.path }) });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'hi' });
    await sleep(100); // run/start is durable, the model call hangs: rt1 is abandoned (a crash)
    const rt2 = createRuntime({ model: scriptedModel(['the answer']), store: lmdbStore({ path: dir.path }) });
    cleanups.push(async () => {
      await rt2.close();
      await dir.cleanup();
    });
    const s2 = await rt2.openSession('s');
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({
      status: 'succeeded',
      finalMessage: 'the answer',
    });
    // DESIGN §6: "if that attempt was interrupted and the run has settled since (through a
    // continue), the run's settled result"
    const again = await s2.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'hi' });
    expect(again).toMatchObject({ status: 'succeeded', finalMessage: 'the answer' });
  });
});
