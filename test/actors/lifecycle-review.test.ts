import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel, type EventStore } from '../../src/index.js';
import { logOf, sleep, storeWithAppend } from '../helpers/runtime.js';
import { lmdbPath as lmdbPathFor, hookedStore } from '../helpers/lmdb-path.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Resolves with `p`, or with 'still pending' after `ms`. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => 'still pending' as const)]);

const lmdbPath = () => lmdbPathFor(cleanups);


/** An EventStore wrapper whose getEventById can be delayed (a slow read). */
function slowReads(inner: EventStore, delay: (eventId: string) => Promise<void> | void): EventStore {
  const s = storeWithAppend(inner, (...a) => inner.append(...a));
  return {
    ...s,
    getEventById: async (id, e) => {
      await delay(e);
      return inner.getEventById(id, e);
    },
  };
}

describe('lifecycle review: follow-ups, close and idle', () => {
  // guarantees.md, submitInput: "follow_up: starts a new run (runId = inputId) when the current one
  // settles, at once when idle". An execute that only returns a recorded result (or is refused after
  // reading the log) ends through settleIdle(), which never starts the follow-up accepted meanwhile.
  it('a follow-up accepted while an execute is returning a recorded result starts once that execute returns', async () => {
    const db = lmdbPath();
    let slow = false;
    // a slow log read (a busy disk): the re-execute below is still reading while the follow-up is accepted
    const store = slowReads(lmdbStore({ path: db.path }), async (e) => {
      if (slow && e === 'run-end:r1:a1') await sleep(300);
    });
    const rt = db.rt({ model: scriptedModel(['first', 'second']) }, store);
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).status).toBe('succeeded');
    slow = true;
    const again = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    expect((await s.submitInput({ inputId: 'f1', message: 'two', mode: 'follow_up' })).status).toBe('accepted');
    expect((await again).status).toBe('succeeded'); // the recorded result, nothing run
    await within(s.waitForIdle(), 1500);
    await sleep(300);
    const log = await logOf(rt.store, 's');
    // observed: f1 is never started (no run/start, no run/end) until some other run happens to end
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  // guarantees.md, close()/runtime.close(): "a run in progress is abandoned where it stands ...; its
  // pending execute resolves with a detached result saying so (also one still reading the log before
  // its attempt started)". With runtime.close() the store is closed under the preparing execute.
  it('runtime.close() while an execute is still reading the log settles it with a detached result, not a StoreClosedError rejection', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await rt.close();
    const got = await within(p.then((r) => r, (e: unknown) => ({ rejected: String(e) })), 1000);
    expect(got).toMatchObject({ runId: 'r', attemptId: 'a', status: 'detached', outcome: 'incomplete' });
  });

  // guarantees.md, waitForIdle(): "resolves when no attempt runs and no follow-up waits to start".
  // close() leaves `busy` set (the stopped run never reports), so a waitForIdle made after close never settles.
  it('waitForIdle() called after session.close() (a run was in progress) resolves', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }]) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await sleep(50);
    await s.close();
    expect((await p).status).toBe('detached');
    expect(await within(s.waitForIdle(), 1000)).not.toBe('still pending');
  });

  // DESIGN §6: "ExecutionResult { ... checkpointCommitted ... }" and guarantees.md: without a delivery
  // owner "the result itself was the delivery" (delivery/committed owner 'result'). When close() lands
  // while the run/end commit is already in flight, the commit lands (succeeded, final delivered through
  // the result) but the execute is told `detached ... the run is left resumable: continue it` — and
  // a continue is then refused; the final answer never reaches the caller.
  it('session.close() while the run/end commit is in flight: the execute result agrees with the log', async () => {
    const db = lmdbPath();
    let session: { close(): Promise<void> } | undefined;
    const store = hookedStore(lmdbStore({ path: db.path }), async (drafts) => {
      if (drafts.some((d) => d.type === 'run/end')) {
        void session!.close(); // shutdown while the closing commit is being written
        await sleep(20);
      }
    });
    const rt = db.rt({ model: scriptedModel(['the answer']) }, store);
    const s = await rt.openSession('s');
    session = s;
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await sleep(100);
    const reader = lmdbStore({ path: db.path });
    const log = await logOf(reader, 's');
    await reader.close();
    const end = log.find((e) => e.type === 'run/end');
    expect({ result: r.status, logged: end?.payload.status ?? 'none' }).toEqual(end ? { result: 'succeeded', logged: 'succeeded' } : { result: 'detached', logged: 'none' });
  });
});

describe('lifecycle review: cancel and frozen contexts', () => {
  // guarantees.md, requestCancel(): "cancels the attempt running when it is called". An execute that
  // is still preparing is covered for requestDetach ("A detach asked for while an execute was still
  // preparing its attempt", detachPending) and RunInput.cancelRequested is documented as "A detach or
  // cancel asked for before the attempt had started" — but nothing ever sets it: the cancel is
  // dropped (false) and the attempt then runs its side-effecting tool to completion.
  it('requestCancel() right after execute() (attempt still preparing) cancels that attempt', async () => {
    const runs: string[] = [];
    const act = defineTool({ name: 'act', description: '', parameters: z.object({}), execute: () => (runs.push('act'), 'done') });
    const rt = createRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'act', arguments: {} }] }, 'finished']), tools: [act], store: memoryStore() });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    const cancelled = await s.requestCancel();
    const r = await p;
    expect({ cancelled, status: r.status, runs }).toEqual({ cancelled: true, status: 'cancelled', runs: [] });
  });

  // guarantees.md, turnContexts: "a map runId → the frozen context each run started from". A respond
  // (or continue) attempt calls start() again and replaces the run's entry with the surface at that
  // moment (here: the run's own assistant tool-call message appears in what it "started from").
  it('a respond attempt does not replace the frozen context its run started from', async () => {
    const pay = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const rt = createRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'ok']), tools: [pay], store: memoryStore() });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay it' });
    expect(r1.status).toBe('suspended');
    const started = s.turnContexts.get('r')!;
    expect(started.messages.map((m) => m.content)).toEqual(['pay it']);
    await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r1.pendingRequest!.questionId, answer: { decisions: { p1: 'approve' } } });
    expect(s.turnContexts.get('r')!.messages.map((m) => m.content)).toEqual(['pay it']);
  });
});

describe('lifecycle review: commit points', () => {
  // DESIGN §5: "final/message without delivery event: redelivered when the delivery owner declares
  // itself idempotent ..., else delivery/unknown"; promise: "no final answer silently ... delivered
  // twice". The run/end commit fails once (a transient store error) after the final was delivered;
  // the session keeps the run open in memory and an in-process `continue` calls the model again and
  // delivers a second, different final answer for the same run (openSession would have settled it).
  it('after a failed run/end commit, an in-process continue does not deliver a second final answer to a non-idempotent owner', async () => {
    const db = lmdbPath();
    let failed = false;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      if (!failed && drafts.some((d) => d.type === 'run/end')) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const delivered: string[] = [];
    const rt = db.rt({ model: scriptedModel(['answer one', 'answer two']), delivery: { deliver: async (f) => void delivered.push(f.content) } }, store);
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r1).toMatchObject({ checkpointCommitted: false });
    expect(delivered).toEqual(['answer one']);
    await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' }).catch((e: unknown) => e);
    expect(delivered).toEqual(['answer one']);
    const log = await logOf(rt.store, 's');
    expect(log.filter((e) => e.type === 'final/message')).toHaveLength(1);
  });

  // DESIGN §4 item 5: "`completed.concludesTurn` ends the run after this batch with that content as
  // the final answer". A crash after the results commit (tool/result with concludesTurn + step/end)
  // and before final/message: `continue` (startStep) asks the model for a new step instead of
  // finalizing with the tool's content — an extra model call and a different final answer.
  it('a crash between a concludesTurn result commit and final/message: continue finalizes with the tool content, calling no model', async () => {
    const db = lmdbPath();
    const finish = defineTool({ name: 'finish', description: '', parameters: z.object({}), execute: () => ({ kind: 'completed' as const, content: 'all done by tool', concludesTurn: true }) });
    const dies = new Promise<void>(() => {});
    const store1 = hookedStore(lmdbStore({ path: db.path }), async (drafts) => {
      if (drafts.some((d) => d.type === 'final/message')) await dies; // the process dies here
    });
    const rt1 = createRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'finish', arguments: {} }] }]), tools: [finish], store: store1 });
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

  // Promise: "no side-effecting tool silently run twice ... every uncertainty reported by name";
  // guarantees.md: "no tool call is ever left unanswered on the surface". The results commit fails
  // once (transient store error) after an exclusive tool ran: the run then commits run/end `failed`
  // with historyConsistent: true — the call has no tool/result, is not reported uncertain after a
  // restart, holds no lock, and stays unanswered on the surface the next run sends to the model.
  it('a results commit that fails once after an exclusive tool ran: the call is answered or reported, never silently dropped', async () => {
    const db = lmdbPath();
    let failed = false;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      if (!failed && drafts.some((d) => d.type === 'tool/result')) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const runs: string[] = [];
    const charge = defineTool({ name: 'charge', description: '', parameters: z.object({}), resources: ['card'], execute: () => (runs.push('charge'), 'charged') });
    const rt = db.rt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'charge', arguments: {} }] }, 'done']), tools: [charge] }, store);
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(runs).toEqual(['charge']);
    await rt.close();
    const model2 = scriptedModel(['next']);
    const rt2 = db.rt({ model: model2, tools: [charge] });
    const s2 = await rt2.openSession('s');
    const log = await logOf(rt2.store, 's');
    const answered = log.some((e) => e.type === 'tool/result' && e.payload.callId === 'c1');
    const reported = s2.recovery.uncertainToolCalls.some((c) => c.callId === 'c1');
    expect({ answered, reported, historyConsistent: r.historyConsistent }).not.toEqual({ answered: false, reported: false, historyConsistent: true });
    await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'next' });
    const msgs = model2.requests[0]!.messages;
    const unanswered = msgs.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : [])).filter((id) => !msgs.some((m) => m.role === 'tool' && m.toolCallId === id));
    expect(unanswered).toEqual([]);
  });
});
