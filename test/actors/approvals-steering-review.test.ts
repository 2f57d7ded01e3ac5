import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';

describe('stopAfterCurrentToolRound', () => {
  it('the same stop request sent twice at once (a client retry) returns one receipt and the run still ends stopped with its tool result', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (started.resolve(), await gate.promise, 'done') });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'never asked', 'second run']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    const req = { sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r', expectedRunEpoch: 1, idempotencyKey: 'k1' };
    const [first, retry] = await Promise.all([s.stopAfterCurrentToolRound(req), s.stopAfterCurrentToolRound(req)]);
    expect(retry).toEqual(first);
    gate.resolve();
    const r = await running;
    // today: status 'failed', error "expected seq 9 but the next seq is 8" (SequenceConflictError),
    // checkpointCommitted false — the tool ran but its result and run/end are never written
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped', checkpointCommitted: true });
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'tool/result').map((e) => e.payload.callId)).toEqual(['c1']);
    expect(log.filter((e) => e.type === 'steering/accepted')).toHaveLength(1);
    // and the session keeps working afterwards (today every later commit is refused)
    expect((await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'again' })).status).toBe('succeeded');
  });

  it('a stop accepted while the step is still compacting (no model call under way yet) starts no new model call', async () => {
    const model = scriptedModel(['ok0', { text: 'SUMMARY', delayMs: 150 }, 'answer after the stop']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 1500, outputReserve: 100 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: 'x'.repeat(3000) });
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'z'.repeat(3000) });
    while (model.requests.length < 2) await sleep(2); // the summary call of the compaction is under way
    await s.stopAfterCurrentToolRound({ sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r1', expectedRunEpoch: 1, idempotencyKey: 'k' });
    const r = await running;
    expect((await logOf(store, 's')).some((e) => e.type === 'compaction')).toBe(true);
    // today: the step's model call starts after the receipt was returned, and the run ends succeeded
    expect(model.requests).toHaveLength(2);
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped' });
  });
});

describe('steering inputs', () => {
  it('a steer accepted while the step is compacting reaches the model call that follows', async () => {
    const model = scriptedModel(['ok0', { text: 'SUMMARY', delayMs: 150 }, 'final1']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 1500, outputReserve: 100 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: 'x'.repeat(3000) });
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'z'.repeat(3000) });
    while (model.requests.length < 2) await sleep(2); // compaction's summary call under way, the step's model call not started
    expect((await s.submitInput({ inputId: 'st', message: 'use metric units', mode: 'steer' })).status).toBe('accepted');
    expect((await running).status).toBe('succeeded');
    expect(model.requests).toHaveLength(3);
    // today: the request has no steer message; the steer stays pending for some later run
    expect(model.requests[2]!.messages.at(-1)).toMatchObject({ role: 'user', content: 'use metric units' });
    expect((await logOf(store, 's')).some((e) => e.type === 'user/message' && e.payload.inputId === 'st')).toBe(true);
  });
});

describe('questions', () => {
  it('an answer that fails the question\'s JSON Schema (a required key missing) is refused, not made the tool result', async () => {
    const schema = { type: 'object', required: ['email'] };
    const model = scriptedModel([{ toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'Your email?', schema } }] }, 'thanks']);
    const { runtime, store } = lmdbRuntime({ model, askUser: true });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'sign me up' });
    expect(r).toMatchObject({ status: 'suspended', pendingRequest: { kind: 'question', schema } });
    const bad = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: {} }).then(
      (res) => res,
      (e: Error) => e,
    );
    // today: accepted — the run succeeds with '{}' as the askUser result, although {} lacks the required "email"
    expect(bad).toBeInstanceOf(Error);
    expect((bad as Error).name).toBe('ValidationError');
    expect((await logOf(store, 's')).filter((e) => e.type === 'tool/result')).toHaveLength(0);
    expect(s.pendingRequest).toMatchObject({ kind: 'question', callId: 'q1' });
  });
});

describe('cancelInput', () => {
  it('cancelInput of a steer whose submitInput is still being written withdraws it, instead of calling the id unknown and letting it through', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (started.resolve(), await gate.promise, 'done') });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'end']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    const submitted = s.submitInput({ inputId: 'st', message: 'oops, ignore this', mode: 'steer' });
    // the session already knows the id (a second submitInput of it now returns the same receipt)
    const cancelled = await s.cancelInput('st').then(
      (x) => x,
      (e: Error) => e,
    );
    await submitted;
    gate.resolve();
    await running;
    // today: ValidationError "no input st in this session", and the steer reaches the model
    expect(cancelled).toMatchObject({ inputId: 'st', status: 'cancelled' });
    expect(model.requests[1]!.messages.map((m) => m.content)).not.toContain('oops, ignore this');
    expect((await logOf(store, 's')).some((e) => e.type === 'input/cancelled' && e.payload.inputId === 'st')).toBe(true);
  });
});
