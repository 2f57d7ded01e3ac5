import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { InspectionEvent } from 'xstate';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type EventStore, type RuntimeOptions } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { holdingAppendOf, logOf, storeWithAppend, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// A cancel recorded (`cancellation/requested`) by an attempt that stopped before its cancelled
// `run/end` committed stands: the run's next attempt, whatever it was asked to do, starts
// cancelled — it resolves the interrupted calls without starting any again, calls no model and
// ends `cancelled` (docs/guarantees.md, "Recovery: each crash point").

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A second life on the LMDB file `dir` (the first one abandoned mid-run, as a killed process leaves it). */
function nextLife(dir: string, options: Omit<RuntimeOptions, 'store'>) {
  const runtime = createRuntime({ ...options, store: lmdbStore({ path: dir }) });
  cleanups.push(() => runtime.close());
  return runtime;
}

const hang = () => new Promise<string>(() => {});
const look = (execute: () => Promise<string> | string) =>
  defineTool({ name: 'look', description: '', mode: 'parallel', parameters: z.object({}), execute });
const pay = (execute: () => Promise<string> | string) =>
  defineTool({ name: 'pay', description: '', parameters: z.object({}), resources: ['card'], execute });

/**
 * Life 1 on `dir`: a prompt whose parallel `look` hangs (ignoring its signal), cancelled once it
 * runs. With a grace longer than the test the cancelled end never commits, as a killed process leaves it.
 */
async function lookCancelled(dir: string, cancelGraceMs: number) {
  const started = deferred();
  const runtime = createRuntime({
    store: lmdbStore({ path: dir }),
    model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]),
    tools: [look(() => (started.resolve(), hang()))],
    config: { cancelGraceMs },
  });
  const session = await runtime.openSession('s');
  const running = session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
  await started.promise;
  await session.requestCancel();
  return { running }; // (wrapped: returned bare, an async function would wait for it)
}

/**
 * An `inspect` option that cancels (`reason`) the moment a run machine starts — before its
 * attempt's run/start is staged; `bind` names the session, `sent` is the requestCancel's promise.
 */
function cancelAsItStarts(reason: string) {
  let session: { requestCancel(reason: string): Promise<boolean> } | undefined;
  let sent: Promise<boolean> | undefined;
  return {
    inspect: (e: InspectionEvent) => {
      if (sent || e.type !== '@xstate.snapshot' || (e.actorRef as { id?: string }).id !== 'run') return;
      if ((e.snapshot as { value?: unknown }).value === 'starting') sent = session?.requestCancel(reason);
    },
    bind: (s: typeof session) => void (session = s),
    sent: () => sent,
  };
}

describe('a cancel recorded before a crash stands', () => {
  it('continue after a crash that followed a recorded cancel ends the run cancelled: no model call, no tool started again, the interrupted calls resolved and named', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const started = deferred();
    // life 1: both calls ignore their signals; the grace outlasts the life, so the cancelled end never commits
    const rt1 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'c1', name: 'look', arguments: {} },
            { id: 'c2', name: 'pay', arguments: {} },
          ],
        },
      ]),
      tools: [look(() => (started.resolve(), hang())), pay(hang)],
      config: { cancelGraceMs: 60_000 },
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    expect(await s1.requestCancel('the user changed their mind')).toBe(true);

    const ran: string[] = [];
    const model = scriptedModel(['must not be asked']);
    const rt2 = nextLife(dir.path, {
      model,
      tools: [look(() => (ran.push('look'), 'seen')), pay(() => (ran.push('pay'), 'paid'))],
    });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', cancelRequested: { reason: 'the user changed their mind' } }]);
    // what continue will do: the side-effect-free call is not run again under the cancel; the payment may have run
    expect(s2.recovery.uncertainToolCalls.map((c) => [c.callId, c.resolution])).toEqual([
      ['c1', 'skipped'],
      ['c2', 'uncertain-hanging'],
    ]);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(r.uncertainCalls.map((c) => [c.callId, c.resolution])).toEqual([
      ['c1', 'skipped'],
      ['c2', 'uncertain-hanging'],
    ]);
    expect({ ran, asked: model.requests.length }).toEqual({ ran: [], asked: 0 });
    const log = await logOf(rt2.store, 's');
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['cancelled']);
    expect(
      log.filter((e) => e.type === 'tool/result').map((e) => [e.payload.callId, (e.payload.outcome as { kind: string }).kind]),
    ).toEqual([
      ['c1', 'skipped'],
      ['c2', 'uncertain-hanging'],
    ]);
    // settled: a reopen finds nothing to continue
    const rt3 = nextLife(dir.path, { model: scriptedModel([]) });
    expect((await rt3.openSession('s')).recovery.interruptedRuns).toEqual([]);
  });

  it('a cancel asked for while the attempt was prepared is recorded with its run/start: a crash before its end leaves it standing', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const inner = lmdbStore({ path: dir.path });
    // life 1 stops as its cancelled end commits
    const { store, landing } = holdingAppendOf(inner, 'run/end');
    const rt1 = createRuntime({ store: store as EventStore, model: scriptedModel(['never asked']) });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(await s1.requestCancel('asked early')).toBe(true);
    await landing.promise;
    const first = await logOf(inner, 's');
    expect(typesOf(first).slice(-3)).toEqual(['run/start', 'user/message', 'cancellation/requested']);

    const model = scriptedModel(['must not be asked']);
    const rt2 = nextLife(dir.path, { model });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', cancelRequested: { reason: 'asked early' } }]);
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'cancelled' });
    expect(model.requests).toHaveLength(0);
    // the second attempt's cancel came from the log: it is not recorded again
    expect(typesOf(await logOf(rt2.store, 's')).filter((t) => t === 'cancellation/requested')).toHaveLength(1);
  });

  it("a cancel sent as a run's first attempt is starting lands ahead of its run/start and stands all the same after a crash", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const inner = lmdbStore({ path: dir.path });
    const { store, landing } = holdingAppendOf(inner, 'run/end');
    const cancel = cancelAsItStarts('at once');
    const rt1 = createRuntime({ store, model: scriptedModel(['never asked']), inspect: cancel.inspect });
    const s1 = await rt1.openSession('s');
    cancel.bind(s1);
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await landing.promise;
    expect(await cancel.sent()).toBe(true);
    const types = typesOf(await logOf(inner, 's'));
    expect(types.indexOf('cancellation/requested')).toBeLessThan(types.indexOf('run/start'));

    const model = scriptedModel(['must not be asked']);
    const s2 = await nextLife(dir.path, { model }).openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', cancelRequested: { reason: 'at once' } }]);
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'cancelled' });
    expect(model.requests).toHaveLength(0);
  });

  it('a cancel that landed ahead of an attempt whose run/start never committed stands for no other run', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const inner = lmdbStore({ path: dir.path });
    // run r's run/start fails to commit (after its cancel landed); run r2 is then interrupted as its end commits
    const end = holdingAppendOf(inner, 'run/end');
    const store = storeWithAppend(end.store, (id, epoch, seq, drafts) =>
      drafts.some((d) => d.type === 'run/start' && (d.payload as { runId?: string }).runId === 'r')
        ? Promise.reject(new Error('the disk is full (injected)'))
        : end.store.append(id, epoch, seq, drafts),
    );
    const cancel = cancelAsItStarts('for r only');
    const rt1 = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]),
      tools: [look(() => 'seen')],
      inspect: cancel.inspect,
    });
    const s1 = await rt1.openSession('s');
    cancel.bind(s1);
    expect((await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'first' })).status).not.toBe('succeeded');
    expect(await cancel.sent()).toBe(true);
    void s1.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'second' });
    await end.landing.promise;
    const types = typesOf(await logOf(inner, 's'));
    expect(types.indexOf('cancellation/requested')).toBeLessThan(types.indexOf('run/start'));

    const model = scriptedModel(['the answer']);
    const s2 = await nextLife(dir.path, { model, tools: [look(() => 'seen')] }).openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r2' }]);
    expect(s2.recovery.interruptedRuns[0]).not.toHaveProperty('cancelRequested');
    expect(await s2.execute({ kind: 'continue', runId: 'r2', attemptId: 'b2' })).toMatchObject({ status: 'succeeded' });
  });

  it('a new prompt after such a crash first settles the interrupted run cancelled, then runs; its result reports the recovery', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    await lookCancelled(dir.path, 60_000);
    const ran: string[] = [];
    const model = scriptedModel(['the new answer']);
    const rt2 = nextLife(dir.path, { model, tools: [look(() => (ran.push('look'), 'seen'))] });
    const s2 = await rt2.openSession('s');
    const r = await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'something else' });
    expect(r).toMatchObject({ status: 'succeeded', recovered: { runId: 'r', status: 'cancelled' } });
    expect(r.recovered!.uncertainCalls).toMatchObject([{ callId: 'c1', resolution: 'skipped' }]);
    // the only model call is the new run's
    expect({ ran, asked: model.requests.length }).toEqual({ ran: [], asked: 1 });
  });

  it.each(['respond', 'prompt'] as const)(
    'a run that was suspending for an approval when its cancel was recorded rests interrupted after a crash, not waiting: a %s ends it cancelled, announcing and running no call',
    async (next) => {
      const dir = tempDir();
      cleanups.push(() => dir.cleanup());
      const inner = lmdbStore({ path: dir.path });
      // life 1: the cancel comes as the approval request commits; the process stops as the cancelled end commits
      const request = holdingAppendOf(inner, 'approval/requested');
      const end = holdingAppendOf(request.store, 'run/end');
      const ran: string[] = [];
      const payTool = () =>
        defineTool({
          name: 'pay',
          description: '',
          parameters: z.object({}),
          needsApproval: true,
          execute: () => (ran.push('pay'), 'paid'),
        });
      const rt1 = createRuntime({
        store: end.store,
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'pay', arguments: {} }] }]),
        tools: [payTool()],
      });
      const s1 = await rt1.openSession('s');
      void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await request.landing.promise;
      const cancelled = s1.requestCancel('no payment');
      request.release.resolve();
      expect(await cancelled).toBe(true);
      await end.landing.promise;

      const model = scriptedModel(['the next answer']);
      const rt2 = nextLife(dir.path, { model, tools: [payTool()] });
      const s2 = await rt2.openSession('s');
      const [open] = s2.recovery.interruptedRuns;
      expect(open).toMatchObject({ runId: 'r', cancelRequested: { reason: 'no payment' } });
      // nothing waits for an answer: the run is interrupted (a worker continues it, a new prompt first settles it)
      expect({ pending: open!.pendingRequest, status: s2.snapshot().status, asked: s2.pendingRequest }).toEqual({
        pending: undefined,
        status: 'detached',
        asked: undefined,
      });
      await expect(s2.approve('c1')).rejects.toThrow(/no approval is pending/);
      if (next === 'respond') {
        // (an app that kept the request's id from before the crash may still answer it)
        const asked = (await logOf(inner, 's')).find((e) => e.type === 'approval/requested')!;
        const questionId = (asked.payload.pendingRequest as { questionId: string }).questionId;
        const answer = { decisions: { c1: 'approve' } };
        const r = await s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId, answer });
        expect(r.status).toBe('cancelled');
        expect(model.requests).toHaveLength(0);
      } else {
        const r = await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'something else' });
        expect(r).toMatchObject({ status: 'succeeded', recovered: { runId: 'r', status: 'cancelled' } });
        expect(model.requests).toHaveLength(1);
      }
      expect(ran).toEqual([]);
      const log = await logOf(rt2.store, 's');
      expect(typesOf(log)).not.toContain('tool/call');
      expect(log.filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome)).toMatchObject([{ kind: 'skipped' }]);
    },
  );

  it('a run whose recorded cancel was honoured by its end is not cancelled again: the next run of the session runs', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    expect((await (await lookCancelled(dir.path, 20)).running).status).toBe('cancelled');
    const rt2 = nextLife(dir.path, { model: scriptedModel(['fine']) });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toEqual([]);
    expect(await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'again' })).toMatchObject({ status: 'succeeded' });
  });
});
