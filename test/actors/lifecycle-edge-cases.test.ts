import { BehaviorSubject, Subject } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isValidationError, lmdbStore, scriptedModel, type ExecutionSession } from '../../src/index.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { lmdbPath as lmdbPathFor, hookedStore } from '../helpers/lmdb-path.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Resolves with `p`, or with 'still pending' after `ms`. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => 'still pending' as const)]);

const lmdbPath = () => lmdbPathFor(cleanups);


describe('lifecycle edge cases: inputs across processes', () => {
  it('a cancelled input submitted again from a new process gets its cancelled receipt, not consumed', async () => {
    const db = lmdbPath();
    const rt1 = db.rt({ model: scriptedModel([]) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' });
    expect((await s1.cancelInput('in')).status).toBe('cancelled');
    expect((await s1.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' })).status).toBe('cancelled');
    await rt1.close();
    const rt2 = db.rt({ model: scriptedModel([]) });
    const s2 = await rt2.openSession('s');
    expect(await s2.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' })).toEqual({ inputId: 'in', status: 'cancelled', durability: 'durable' });
  });

  it('cancelInput of an input consumed in an earlier process returns its receipt instead of calling the id unknown', async () => {
    const db = lmdbPath();
    const rt1 = db.rt({ model: scriptedModel(['ok']) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'f1', message: 'do it', mode: 'follow_up' });
    await s1.waitForIdle();
    expect((await s1.cancelInput('f1')).status).toBe('consumed');
    await rt1.close();
    const rt2 = db.rt({ model: scriptedModel([]) });
    const s2 = await rt2.openSession('s');
    const got = await s2.cancelInput('f1').catch((e: unknown) => e);
    expect(isValidationError(got)).toBe(false);
    expect(got).toEqual({ inputId: 'f1', status: 'consumed', durability: 'durable' });
  });

  it('a follow-up still pending when the session is reopened starts, and waitForIdle resolves', async () => {
    const db = lmdbPath();
    // the kill switch keeps the follow-up from starting in the first process (as a crash between
    // input/accepted and run/start would)
    const rt1 = db.rt({ model: scriptedModel([]), killSwitch: new BehaviorSubject(true) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'f1', message: 'later', mode: 'follow_up' });
    await rt1.close();
    const rt2 = db.rt({ model: scriptedModel(['done']) });
    const s2 = await rt2.openSession('s');
    expect(await within(s2.waitForIdle(), 1000)).not.toBe('still pending');
    const log = await logOf(rt2.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  it('a follow-up submitted while the kill switch was set starts once the switch is cleared', async () => {
    const db = lmdbPath();
    const ks = new BehaviorSubject<boolean>(true);
    const rt = db.rt({ model: scriptedModel(['done']), killSwitch: ks });
    const s = await rt.openSession('s');
    await s.submitInput({ inputId: 'f1', message: 'later', mode: 'follow_up' });
    ks.next(false);
    expect(await within(s.waitForIdle(), 1000)).not.toBe('still pending');
    const log = await logOf(rt.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  it('a follow_up whose inputId names an earlier run is refused, never accepted and then failed', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['first', 'second']) });
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).status).toBe('succeeded');
    const results: ExecutionResult[] = [];
    s.events$.subscribe((e) => e.event.type === 'execution_finished' && results.push(e.event.result));
    const got = await s.submitInput({ inputId: 'r1', message: 'two', mode: 'follow_up' }).catch((e: unknown) => e);
    await within(s.waitForIdle(), 1000);
    // either refused up front, or run as its own run; never accepted and then failed
    if (!isValidationError(got)) expect(results.map((r) => r.status)).toEqual(['succeeded']);
    else expect(results).toEqual([]);
  });
});

describe('lifecycle edge cases: stop after current tool round', () => {
  it('a stop accepted before the run suspends for an approval still stops the run after the approved batch', async () => {
    const db = lmdbPath();
    const executed: string[] = [];
    const pay = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => (executed.push('pay'), 'paid') });
    const model = scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }], delayMs: 100 }, 'should not be asked']);
    const rt = db.rt({ model, tools: [pay] });
    const s = await rt.openSession('s');
    let epoch = 0;
    s.events$.subscribe((e) => { if (e.event.type === 'run_start') epoch = e.event.runEpoch; });
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    while (epoch === 0) await sleep(2);
    await s.stopAfterCurrentToolRound({ sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r', expectedRunEpoch: 1, idempotencyKey: 'stop-1' });
    const r = await running;
    expect(r.status).toBe('suspended');
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { p1: 'approve' } } });
    expect(executed).toEqual(['pay']);
    expect(model.requests).toHaveLength(1); // no new model call after the round
    expect(r2).toMatchObject({ status: 'stopped', outcome: 'incomplete' });
  });
});

describe('lifecycle edge cases: close and races', () => {
  it('an execute still preparing when the session is closed settles with a detached result', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await s.close();
    const got = await within(p.catch((e: unknown) => e), 1000);
    expect(got).not.toBe('still pending');
  });

  it('a stop request racing the end of its run does not stop the follow-up run started after it', async () => {
    const db = lmdbPath();
    let session: ExecutionSession | undefined;
    let stop: Promise<unknown> | undefined;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      // the user asks run A to stop just as A's run/end is being committed
      if (!stop && drafts.some((d) => d.type === 'run/end' && d.payload.runId === 'A')) {
        stop = session!
          .stopAfterCurrentToolRound({ sessionId: 's', sessionInstanceId: session!.sessionInstanceId, interactionId: 'A', expectedRunEpoch: 1, idempotencyKey: 'k' })
          .catch((e: unknown) => e);
      }
    });
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'echoed' });
    const rt = db.rt({ model: scriptedModel([{ text: 'answer A', delayMs: 50 }, { toolCalls: [{ name: 'echo', arguments: {} }], delayMs: 100 }, 'answer B']), tools: [echo] }, store);
    session = await rt.openSession('s');
    const results: ExecutionResult[] = [];
    session.events$.subscribe((e) => e.event.type === 'execution_finished' && results.push(e.event.result));
    const a = session.execute({ kind: 'prompt', runId: 'A', attemptId: 'A1', message: 'first' });
    await sleep(10);
    await session.submitInput({ inputId: 'B', message: 'second', mode: 'follow_up' });
    await a;
    await within(session.waitForIdle(), 2000);
    expect(stop).toBeDefined();
    await stop;
    expect(results.find((r) => r.runId === 'B')).toMatchObject({ status: 'succeeded', finalMessage: 'answer B' });
  });
});

describe('lifecycle edge cases: questions and the kill switch', () => {
  it('an askUser call whose schema cannot be compiled is rejected back to the model, never suspending a run nobody can answer', async () => {
    const db = lmdbPath();
    const model = scriptedModel([{ toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'How many?', schema: { type: 'count' } } }] }, 'thanks']);
    const rt = db.rt({ model, askUser: true });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    // a suspended question whose answers cannot be checked could never be answered (and would
    // keep the session busy for good): the call is a protocol error the model can correct
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'thanks' });
    const rejected = (await logOf(rt.store, "s")).find((e) => e.type === 'tool/batch-rejected')!;
    expect(JSON.stringify(rejected.payload)).toMatch(/not a JSON Schema the runtime can check/);
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'tool', toolCallId: 'q1', isError: true });
  });

  it('a kill switch Observable emitting a falsy value such as 0 clears the switch', async () => {
    const db = lmdbPath();
    const ks = new Subject<unknown>();
    const rt = db.rt({ model: scriptedModel(['hi']), killSwitch: ks });
    const s = await rt.openSession('s');
    ks.next(1);
    ks.next(0);
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    expect(r.status).toBe('succeeded');
  });
});
