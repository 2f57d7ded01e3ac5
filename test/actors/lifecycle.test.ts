import { Subject } from 'rxjs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, isExecutionBusy, isSessionSteeringConflict, isValidationError, lmdbStore, scriptedModel, type Envelope } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { ids, lmdbRuntime, logOf, sleep, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({ t: z.string() }), execute: ({ t }) => t });

describe('inputs', () => {
  it('a steer input lands between batches: after the running batch settles, before the next model call, skipping nothing', async () => {
    const gate = deferred();
    const ran: string[] = [];
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({ n: z.string() }), execute: async ({ n }) => { ran.push(n); if (n === 'a') await gate.promise; return n; } });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: { n: 'a' } }, { name: 'slow', arguments: { n: 'b' } }] }, 'ok']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    const committed: string[] = [];
    s.events$.subscribe((e) => e.event.type === 'input_committed' && committed.push(e.event.inputId));
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    while (!ran.includes('a')) await sleep(2);
    const receipt = await s.submitInput({ inputId: 'in-1', message: 'also do c', mode: 'steer' });
    expect(receipt).toEqual({ inputId: 'in-1', status: 'accepted', durability: 'durable' });
    gate.resolve();
    expect((await running).status).toBe('succeeded');
    expect(ran).toEqual(['a', 'b']); // the queued call b was not skipped
    const log = await logOf(store, 's');
    const steer = log.find((e) => e.type === 'user/message' && e.payload.inputId === 'in-1')!;
    const lastResult = log.filter((e) => e.type === 'tool/result').at(-1)!;
    const secondAssistant = log.filter((e) => e.type === 'assistant/message')[1]!;
    expect(steer.seq).toBeGreaterThan(lastResult.seq);
    expect(steer.seq).toBeLessThan(secondAssistant.seq);
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'user', content: 'also do c' });
    expect(committed).toEqual(['in-1']);
    expect((await s.submitInput({ inputId: 'in-1', message: 'also do c', mode: 'steer' })).status).toBe('consumed');
    expect(log.filter((e) => e.type === 'input/accepted')).toHaveLength(1);
  });

  it('the same inputId again returns the same receipt and never a second message', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['a', 'b']) });
    const s = await runtime.openSession('s');
    const r1 = await s.submitInput({ inputId: 'dup', message: 'hello', mode: 'steer' });
    const r2 = await s.submitInput({ inputId: 'dup', message: 'hello', mode: 'steer' });
    expect(r2).toEqual(r1);
    expect((await logOf(store, 's')).filter((e) => e.type === 'input/accepted')).toHaveLength(1);
    await expect(s.submitInput({ inputId: 'x', message: 'm', mode: 'sideways' } as never)).rejects.toSatisfy(isValidationError);
  });

  it('follow-up inputs start a new run when the current one settles (runId = inputId), and at once when idle', async () => {
    const model = scriptedModel([{ text: 'first', delayMs: 30 }, 'second', 'third']);
    const delivered: string[] = [];
    const { runtime, store } = lmdbRuntime({ model, delivery: { deliver: async (f) => void delivered.push(`${f.runId}:${f.content}`) } });
    const s = await runtime.openSession('s');
    const finished: string[] = [];
    s.events$.subscribe((e) => e.event.type === 'execution_finished' && finished.push(`${e.event.result.runId}:${e.event.result.status}`));
    const first = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    await s.submitInput({ inputId: 'f1', message: 'two', mode: 'follow_up' });
    expect((await first).finalMessage).toBe('first');
    await s.waitForIdle();
    expect(finished).toEqual(['r1:succeeded', 'f1:succeeded']);
    await s.submitInput({ inputId: 'f2', message: 'three', mode: 'follow_up' });
    await s.waitForIdle();
    expect(delivered).toEqual(['r1:first', 'f1:second', 'f2:third']);
    const starts = (await logOf(store, 's')).filter((e) => e.type === 'run/start').map((e) => [e.payload.runId, e.payload.kind, e.turn]);
    expect(starts).toEqual([['r1', 'prompt', 1], ['f1', 'follow_up', 2], ['f2', 'follow_up', 3]]);
  });

  it('cancelInput withdraws an input not yet consumed', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['ok']) });
    const s = await runtime.openSession('s');
    await s.submitInput({ inputId: 'st', message: 'never mind', mode: 'steer' });
    expect((await s.cancelInput('st')).status).toBe('cancelled');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const log = await logOf(store, 's');
    expect(typesOf(log)).toContain('input/cancelled');
    expect(log.some((e) => e.type === 'user/message' && e.payload.inputId === 'st')).toBe(false);
  });

  it('pending inputs survive reopening the session', async () => {
    const dir = tempDir();
    const rt1 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'later', message: 'remember me', mode: 'steer' });
    await rt1.close();
    const model = scriptedModel(['ok']);
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model });
    const s2 = await rt2.openSession('s');
    await s2.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(model.requests[0]!.messages.map((m) => m.content)).toEqual(['go', 'remember me']);
    await rt2.close();
    await dir.cleanup();
  });
});

describe('approvals and questions', () => {
  const pay = defineTool({ name: 'pay', description: '', parameters: z.object({ amount: z.number() }), needsApproval: (a) => a.amount > 10, execute: ({ amount }) => `paid ${amount}` });

  it('approve: the run suspends before the call, then respond runs it', async () => {
    const executed: number[] = [];
    const payT = defineTool({ ...pay, parameters: z.object({ amount: z.number() }), needsApproval: (a) => a.amount > 10, execute: ({ amount }) => (executed.push(amount), `paid ${amount}`) });
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 50 } }, { id: 'p2', name: 'pay', arguments: { amount: 5 } }] }, 'paid both']), tools: [payT] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r).toMatchObject({ outcome: 'suspended', status: 'suspended', pendingRequest: { kind: 'approval', calls: [{ callId: 'p1', name: 'pay', arguments: { amount: 50 } }] } });
    expect(executed).toEqual([]);
    await expect(s.execute({ kind: 'prompt', ...ids(), message: 'other' })).rejects.toSatisfy(isExecutionBusy);
    const q = r.pendingRequest!.questionId;
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { decisions: { p1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'paid both' });
    expect(executed.sort()).toEqual([5, 50]);
    const log = await logOf(store, 's');
    expect(log.find((e) => e.type === 'approval/decided')!.payload).toMatchObject({ questionId: q, decisions: { p1: 'approve' }, timedOut: false });
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runEpoch)).toEqual([1, 2]);
  });

  it('deny (or leaving a call out) gives an error result the model reads; nothing runs', async () => {
    const executed: number[] = [];
    const payT = defineTool({ name: 'pay', description: '', parameters: z.object({ amount: z.number() }), needsApproval: true, execute: ({ amount }) => (executed.push(amount), 'paid') });
    const model = scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 50 } }, { id: 'p2', name: 'pay', arguments: { amount: 60 } }] }, 'ok, not paid']);
    const { runtime, store } = lmdbRuntime({ model, tools: [payT] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { p1: 'deny' } } });
    expect(executed).toEqual([]);
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome);
    expect(results).toMatchObject([{ isError: true, content: expect.stringContaining('denied') }, { isError: true }]);
    expect(model.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId)).toEqual(['p1', 'p2']);
  });

  it('an answer after approvalTimeoutMs counts as denied', async () => {
    const executed: number[] = [];
    const payT = defineTool({ name: 'pay', description: '', parameters: z.object({ amount: z.number() }), execute: ({ amount }) => (executed.push(amount), 'paid') });
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 1 } }] }, 'too late']), tools: [payT], approvalFor: ['tool:pa*'], config: { approvalTimeoutMs: 20 } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await sleep(40);
    await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { p1: 'approve' } } });
    expect(executed).toEqual([]);
    const decided = (await logOf(store, 's')).find((e) => e.type === 'approval/decided')!;
    expect(decided.payload).toMatchObject({ timedOut: true, decisions: { p1: 'deny' } });
  });

  it('askUser suspends with a question; the answer (validated against its schema) becomes the tool result', async () => {
    const model = scriptedModel([
      { toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'How many?', schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } }] },
      'got it',
    ]);
    const { runtime, store } = lmdbRuntime({ model, askUser: true });
    const s = await runtime.openSession('s');
    const asked: unknown[] = [];
    s.events$.subscribe((e) => e.event.type === 'question_asked' && asked.push(e.event.pendingRequest));
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r).toMatchObject({ status: 'suspended', pendingRequest: { kind: 'question', callId: 'q1', question: 'How many?' } });
    expect(asked).toHaveLength(1);
    const q = r.pendingRequest!.questionId;
    await expect(s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { n: 'three' } })).rejects.toSatisfy(isValidationError);
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { n: 3 } });
    expect(r2.status).toBe('succeeded');
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!;
    expect(result.payload).toMatchObject({ callId: 'q1', outcome: { kind: 'completed', content: '{"n":3}' } });
    expect(model.requests[0]!.tools.map((t) => t.name)).toContain('askUser');
  });
});

describe('stop after current tool round', () => {
  it('checks every identity field, is durable and idempotent, and stops after the batch', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (started.resolve(), await gate.promise, 'done') });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'never asked']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    let runStart: Extract<Envelope['event'], { type: 'run_start' }> | undefined;
    s.events$.subscribe((e) => { if (e.event.type === 'run_start') runStart = e.event; });
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    expect(runStart).toMatchObject({ sessionInstanceId: s.sessionInstanceId, runId: 'r', runEpoch: 1 });
    const req = { sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r', expectedRunEpoch: 1, idempotencyKey: 'k1' };
    for (const [field, bad] of [['sessionId', 'other'], ['sessionInstanceId', 'nope'], ['interactionId', 'r-other'], ['expectedRunEpoch', 2]] as const) {
      const err = await s.stopAfterCurrentToolRound({ ...req, idempotencyKey: `bad-${field}`, [field]: bad }).catch((e) => e);
      expect(isSessionSteeringConflict(err)).toBe(true);
      expect(err.field).toBe(field);
    }
    const receipt = await s.stopAfterCurrentToolRound(req);
    expect(receipt).toMatchObject({ schemaVersion: 1, request: req, executionProfileFingerprint: runtime.executionProfileFingerprint });
    expect(await s.stopAfterCurrentToolRound(req)).toEqual(receipt);
    await expect(s.stopAfterCurrentToolRound({ ...req, expectedRunEpoch: 1, interactionId: 'r', sessionId: 's', idempotencyKey: 'k1', sessionInstanceId: 'x' })).rejects.toSatisfy(isSessionSteeringConflict);
    expect(typesOf(await logOf(store, 's'))).toContain('steering/accepted');
    gate.resolve();
    const r = await running;
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped' });
    expect(model.requests).toHaveLength(1);
    expect((await logOf(store, 's')).filter((e) => e.type === 'tool/result')).toHaveLength(1);
  });
});

describe('cancel, detach, idle, kill switch', () => {
  it('requestCancel aborts the model call', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }]) });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(30);
    expect(await s.requestCancel()).toBe(true);
    const r = await running;
    expect(r).toMatchObject({ outcome: 'cancelled', status: 'cancelled', error: { kind: 'cancelled' } });
    expect(typesOf(await logOf(store, 's'))).toContain('cancellation/requested');
  });

  it('a tool that ignores its signal past the grace period is recorded uncertain-hanging; the run ends cancelled', async () => {
    const started = deferred();
    const deaf = defineTool({ name: 'deaf', description: '', parameters: z.object({}), resources: ['db'], execute: () => (started.resolve(), new Promise(() => {})) });
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'deaf', arguments: {} }] }]), tools: [deaf], config: { cancelGraceMs: 40 } });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await started.promise;
    await s.requestCancel();
    const r = await running;
    expect(r.status).toBe('cancelled');
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'uncertain-hanging', resourceLocks: ['db'] });
  });

  it('requestDetach stops at the next safe point, leaving the run incomplete and open', async () => {
    const started = deferred();
    const gate = deferred();
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (started.resolve(), await gate.promise, 'x') });
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'later']), tools: [slow] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    expect(s.requestDetach()).toBe(true);
    gate.resolve();
    expect(await running).toMatchObject({ outcome: 'incomplete', status: 'detached' });
    expect((await store.getHead('s'))!.openRun).toMatchObject({ runId: 'r' });
    await s.waitForIdle();
  });

  it('the kill switch cancels running sessions and starts no new attempt while set', async () => {
    const kill = new Subject<boolean>();
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }, 'after']), killSwitch: kill });
    const a = await runtime.openSession('a');
    const running = a.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(30);
    kill.next(true);
    expect((await running).status).toBe('cancelled');
    expect(await a.execute({ kind: 'prompt', ...ids(), message: 'again' })).toMatchObject({ outcome: 'cancelled', status: 'cancelled' });
    kill.next(false);
    expect((await a.execute({ kind: 'prompt', ...ids(), message: 'again' })).status).toBe('succeeded');
  });

  it('waitForIdle resolves when nothing executes', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'x', delayMs: 30 }]) });
    const s = await runtime.openSession('s');
    await s.waitForIdle();
    let done = false;
    void s.execute({ kind: 'prompt', ...ids(), message: 'go' }).then(() => (done = true));
    await s.waitForIdle();
    expect(done).toBe(true);
  });
});

describe('read model, stateContext, checkpoints', () => {
  it('stateContext persists with the session; loadCheckpoint installs a new surface base', async () => {
    const dir = tempDir();
    const model = scriptedModel(['a', 'b']);
    const rt = createRuntime({ store: lmdbStore({ path: dir.path }), model });
    const s = await rt.openSession('s');
    await s.setStateContext({ cart: ['apple'] });
    await s.execute({ kind: 'prompt', ...ids(), message: 'old conversation' });
    await s.loadCheckpoint({ messages: [{ role: 'user', content: 'restored context' }], stateContext: { cart: ['pear'] } });
    await rt.close();
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model });
    const s2 = await rt2.openSession('s');
    expect(s2.stateContext).toEqual({ cart: ['pear'] });
    expect(s2.snapshot().messages.map((m) => m.content)).toEqual(['restored context']);
    await s2.execute({ kind: 'prompt', ...ids(), message: 'new' });
    expect(model.requests[1]!.messages.map((m) => m.content)).toEqual(['restored context', 'new']);
    await expect(s2.setStateContext(() => 1)).rejects.toSatisfy(isValidationError);
    await rt2.close();
    await dir.cleanup();
  });

  it('view is an @xstate/store store kept current from the events', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.view.subscribe((snap) => seen.push(`${snap.context.status}:${snap.context.messages.length}`));
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const ctx = s.view.getSnapshot().context;
    expect(ctx.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(ctx.usage?.outputTokens).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThan(3);
  });
});

describe('subscribers on a session', () => {
  it('a required subscriber makes the run wait; a failing non-required one is listed in deliveryErrors', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await runtime.openSession('s');
    const gate = deferred();
    const got: string[] = [];
    s.subscribe(
      async (e) => {
        got.push(e.event.type);
        if (got.length === 1) await gate.promise;
      },
      { required: true, name: 'audit', capacity: 1, deliveryTimeoutMs: 10_000 },
    );
    s.subscribe(() => { throw new Error('listener bug'); }, { name: 'buggy' });
    let done = false;
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' }).then((r) => ((done = true), r));
    await sleep(100);
    expect(done).toBe(false); // held back by the required subscriber
    expect(s.snapshot().step).toBeLessThanOrEqual(1);
    gate.resolve();
    const r = await running;
    expect(r.status).toBe('succeeded');
    expect(r.deliveryErrors).toEqual([expect.objectContaining({ consumer: 'buggy', reason: 'error', seq: 1 })]);
    await sleep(10);
    expect(got.slice(0, 3)).toEqual(['run_start', 'step_start', 'message_end']);
    expect(got).toContain('execution_finished');
  });
});
