import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isValidationError, scriptedModel } from '../../src/index.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { ids, lmdbRuntime, logOf, memRuntime, typesOf } from '../helpers/runtime.js';
import { expectValidation } from '../helpers/validation.js';

// askUser questions: the run suspends with a question; the answer, checked against its JSON
// Schema, becomes the tool result.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('askUser questions', () => {
  it('askUser suspends with a question; the answer (validated against its schema) becomes the tool result', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          {
            id: 'q1',
            name: 'askUser',
            arguments: { question: 'How many?', schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } },
          },
        ],
      },
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
    await expect(s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { n: 'three' } })).rejects.toSatisfy(
      isValidationError,
    );
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { n: 3 } });
    expect(r2.status).toBe('succeeded');
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!;
    expect(result.payload).toMatchObject({ callId: 'q1', outcome: { kind: 'completed', content: '{"n":3}' } });
    expect(model.requests[0]!.tools.map((t) => t.name)).toContain('askUser');
  });

  it("an answer that fails the question's JSON Schema (a required key missing) is refused and never becomes the tool result", async () => {
    const schema = { type: 'object', required: ['email'] };
    const model = scriptedModel([{ toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'Your email?', schema } }] }, 'thanks']);
    const { runtime, store } = lmdbRuntime({ model, askUser: true });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'sign me up' });
    expect(r).toMatchObject({ status: 'suspended', pendingRequest: { kind: 'question', schema } });
    const bad = await s
      .execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: {} })
      .then(
        (res) => res,
        (e: Error) => e,
      );
    expect(bad).toBeInstanceOf(Error);
    expect((bad as Error).name).toBe('ValidationError');
    expect((await logOf(store, 's')).filter((e) => e.type === 'tool/result')).toHaveLength(0);
    expect(s.pendingRequest).toMatchObject({ kind: 'question', callId: 'q1' });
  });

  it('an askUser call whose schema cannot be compiled is rejected back to the model and suspends nothing', async () => {
    const db = lmdbPath();
    const model = scriptedModel([
      { toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'How many?', schema: { type: 'count' } } }] },
      'thanks',
    ]);
    const rt = db.rt({ model, askUser: true });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    // a suspended question whose answers cannot be checked could never be answered (and would
    // keep the session busy for good): the call is a protocol error the model can correct
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'thanks' });
    const rejected = (await logOf(rt.store, 's')).find((e) => e.type === 'tool/batch-rejected')!;
    expect(JSON.stringify(rejected.payload)).toMatch(/not a JSON Schema the runtime can check/);
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'tool', toolCallId: 'q1', isError: true });
  });
});

describe('answers that are not JSON', () => {
  for (const [label, schema, answer] of [
    ['a BigInt inside an object (schema {type: object})', { type: 'object' }, { n: 1n }],
    ['undefined (schema {})', {}, undefined],
    ['a function (schema {})', {}, () => 'yes'],
  ] as const) {
    it(`respond with ${label} is a ValidationError and the question stays pending`, async () => {
      const { runtime, store } = memRuntime({
        askUser: true,
        model: scriptedModel([{ toolCalls: [{ name: 'askUser', arguments: { question: 'Which one?', schema } }] }, 'thanks']),
      });
      const s = await runtime.openSession('s1');
      const asked = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
      expect(asked.status).toBe('suspended');
      const questionId = asked.pendingRequest!.questionId;
      const before = typesOf(await logOf(store, 's1'));

      // docs/guarantees.md: respond fails with "ValidationError for an unknown question or an
      // invalid answer": the run is not settled and the question is kept
      await expectValidation(s.execute({ kind: 'respond', runId: 'r1', attemptId: 'a2', questionId, answer: answer as unknown }), 'answer');

      expect(typesOf(await logOf(store, 's1'))).toEqual(before);
      // the run still waits for its answer: a valid one resumes it
      expect(s.pendingRequest?.questionId).toBe(questionId);
      const ok = await s.execute({ kind: 'respond', runId: 'r1', attemptId: 'a3', questionId, answer: { pick: 'b' } });
      expect(ok.status).toBe('succeeded');
    });
  }
});

describe('the askUser tool name', () => {
  it('an app tool named askUser is executed like any tool when the askUser option is off', async () => {
    const seen: unknown[] = [];
    // the app's own tool that happens to carry the name (askUser option NOT enabled)
    const ask = defineTool({
      name: 'askUser',
      description: 'look something up in the user directory',
      mode: 'parallel',
      parameters: z.object({ userId: z.string() }),
      execute: (args) => (seen.push(args), 'user 7 is Ada'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'u1', name: 'askUser', arguments: { userId: '7' } }] }, 'Ada']);
    const { runtime } = lmdbRuntime({ model, tools: [ask] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'who is 7?' });
    expect(seen).toEqual([{ userId: '7' }]);
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Ada' });
  });

  it('askUser: true beside an app tool named askUser is refused', () => {
    const mine = defineTool({ name: 'askUser', description: 'mine', parameters: z.object({ q: z.string() }), execute: () => 'x' });
    // DESIGN §6: tool names are unique; the app's tool silently disappearing is a conflict left unreported
    expect(() => lmdbRuntime({ model: scriptedModel(['hi']), tools: [mine], askUser: true })).toThrow(/askUser|unique/);
  });
});
