import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, isValidationError, memoryStore, scriptedModel } from '../../src/index.js';
import { fuzzTools, hostileValue, poison } from './arbitraries.js';
import { bounded, expectLogInvariants, expectResult, fuzz, hostileKey, propertyTimeout, settlesTyped } from './fuzz-lib.js';

/**
 * Generated public-API input: execute requests, respond answers, inputs and state, createRuntime
 * options, defineTool options — valid, malformed and non-JSON. Each call resolves (a valid result)
 * or throws one of actorloop's typed errors, within its bound; a refused call writes nothing, and
 * the session still runs a plain prompt afterwards.
 */

const id = fc.oneof(hostileKey, fc.string({ maxLength: 8 }), poison);
const message = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.record(
    {
      role: fc.constantFrom('user', 'assistant', 'tool', 'nobody'),
      content: fc.oneof(fc.string({ maxLength: 10 }), poison),
      providerData: hostileValue,
    },
    { requiredKeys: ['role'] },
  ),
  fc.array(fc.record({ role: fc.constant('user'), content: fc.string({ maxLength: 10 }), providerData: hostileValue }), { maxLength: 2 }),
  hostileValue,
);
const request = fc.oneof(
  fc.record(
    { kind: fc.constantFrom('prompt', 'respond', 'continue'), runId: id, attemptId: id, questionId: id, message, answer: hostileValue },
    { requiredKeys: ['kind'] },
  ),
  fc.record({
    kind: fc.constant('prompt'),
    runId: hostileKey.filter((k) => k.length > 0),
    attemptId: hostileKey.filter((k) => k.length > 0),
    message,
  }),
  hostileValue,
);

async function session(options: { tools?: boolean } = {}) {
  const store = memoryStore();
  const pay = defineTool({ name: 'pay', description: '', needsApproval: true, parameters: z.object({}), execute: () => 'paid' });
  const runtime = createRuntime({
    store,
    model: scriptedModel([{ toolCalls: [{ id: 'constructor', name: 'pay', arguments: {} }] }, 'ok'], { loop: true }),
    tools: options.tools ? [pay, ...fuzzTools([])] : [],
  });
  return { store, runtime, s: await runtime.openSession('s') };
}

describe('fuzz: public-API input', () => {
  it('execute with generated requests: a result or a typed error; a refusal writes nothing', { timeout: propertyTimeout() }, async () => {
    await fuzz('public-api/execute', request, async (req) => {
      const { store, runtime, s } = await session();
      try {
        const before = (await expectLogInvariants(store, 's')).length;
        const got = await settlesTyped(s.execute(req as never), 'execute');
        if (got.error) expect((await expectLogInvariants(store, 's')).length).toBe(before);
        else expectResult(got.value);
        const after = await settlesTyped(s.execute({ kind: 'prompt', runId: 'after', attemptId: 'after', message: 'hi' }), 'prompt after');
        if (after.value) expectResult(after.value);
        else expect(after.error?.name).toBe('ExecutionBusy'); // a generated prompt may have left a run suspended? (no tools: never)
        await expectLogInvariants(store, 's');
      } finally {
        await bounded(runtime.close(), 'close');
      }
    });
  });

  it('respond to an approval with generated answers: a result or a typed error; a valid answer still settles it', {
    timeout: propertyTimeout(),
  }, async () => {
    await fuzz(
      'public-api/respond',
      fc.record({ answer: hostileValue, questionId: fc.oneof(fc.constant(undefined), id) }),
      async ({ answer, questionId }) => {
        const { store, runtime, s } = await session({ tools: true });
        try {
          const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
          expect(r.status).toBe('suspended');
          const q = questionId === undefined ? r.pendingRequest!.questionId : questionId;
          const got = await settlesTyped(
            s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q as string, answer }),
            'respond',
          );
          if (got.value) expectResult(got.value);
          if (got.value?.status !== 'succeeded') {
            const again = await settlesTyped(
              s.execute({
                kind: 'respond',
                runId: 'r',
                attemptId: 'a3',
                questionId: r.pendingRequest!.questionId,
                answer: { decisions: { constructor: 'approve' } },
              }),
              'valid respond',
            );
            if (got.value) expect(again.value ?? again.error).toBeDefined();
            else expect(again.value).toMatchObject({ status: 'succeeded' });
          }
          await expectLogInvariants(store, 's', ['r']);
        } finally {
          await bounded(runtime.close(), 'close');
        }
      },
    );
  });

  it('inputs, state context, checkpoints, stops and releases with generated values: settled or typed', {
    timeout: propertyTimeout(),
  }, async () => {
    const op = fc.oneof(
      fc.record({
        op: fc.constant('submitInput' as const),
        v: fc.record({ inputId: id, message, mode: fc.constantFrom('steer', 'follow_up', 'other') }),
      }),
      fc.record({ op: fc.constant('submitInput' as const), v: hostileValue }),
      fc.record({ op: fc.constant('cancelInput' as const), v: id }),
      fc.record({ op: fc.constant('setStateContext' as const), v: hostileValue }),
      fc.record({
        op: fc.constant('loadCheckpoint' as const),
        v: fc.record({ messages: fc.array(message, { maxLength: 2 }), stateContext: hostileValue }),
      }),
      fc.record({ op: fc.constant('releaseResources' as const), v: fc.oneof(fc.array(id, { maxLength: 3 }), hostileValue) }),
      fc.record({ op: fc.constant('stopAfterCurrentToolRound' as const), v: hostileValue }),
    );
    await fuzz('public-api/session-ops', fc.array(op, { minLength: 1, maxLength: 4 }), async (ops) => {
      const { store, runtime, s } = await session();
      try {
        for (const { op: name, v } of ops)
          await settlesTyped(
            Promise.resolve().then(() => (s[name] as (x: unknown) => Promise<unknown>)(v)),
            name,
          );
        await bounded(s.waitForIdle(), 'waitForIdle');
        await expectLogInvariants(store, 's');
      } finally {
        await bounded(runtime.close(), 'close');
      }
    });
  });

  it('createRuntime and defineTool with generated options: made, or a ValidationError', { timeout: propertyTimeout() }, async () => {
    const toolOptions = fc.record(
      {
        name: fc.oneof(hostileKey, poison),
        description: fc.oneof(fc.string({ maxLength: 5 }), poison),
        mode: fc.oneof(fc.constantFrom('parallel', 'exclusive'), hostileValue),
        resources: fc.oneof(fc.array(fc.string({ maxLength: 4 }), { maxLength: 2 }), hostileValue),
        timeoutMs: fc.oneof(fc.integer(), fc.double(), poison),
        needsApproval: fc.oneof(fc.boolean(), hostileValue),
        parameters: fc.oneof(fc.constant(z.object({})), hostileValue),
        execute: fc.oneof(
          fc.constant(() => 'ok'),
          hostileValue,
        ),
        extra: hostileValue,
      },
      { requiredKeys: [] },
    );
    const runtimeOptions = fc.record(
      {
        systemPrompt: fc.oneof(fc.string({ maxLength: 5 }), poison),
        bootstrapMessages: fc.oneof(fc.array(message, { maxLength: 2 }), hostileValue),
        config: fc.oneof(
          fc.record(
            {
              contextWindow: fc.oneof(fc.integer(), poison),
              outputReserve: fc.integer(),
              maxParallelTools: fc.oneof(fc.integer(), fc.double()),
              retryBackoffMs: fc.integer(),
            },
            { requiredKeys: [] },
          ),
          hostileValue,
        ),
        budget: fc.oneof(
          fc.record(
            { maxSteps: fc.integer(), maxCost: fc.oneof(fc.string({ maxLength: 5 }), poison), maxDurationMs: fc.integer() },
            { requiredKeys: [] },
          ),
          hostileValue,
        ),
        approvalFor: fc.oneof(fc.array(hostileKey, { maxLength: 2 }), hostileValue),
        askUser: fc.oneof(fc.boolean(), hostileValue),
        tools: fc.oneof(fc.constant(undefined), hostileValue),
      },
      { requiredKeys: [] },
    );
    await fuzz('public-api/options', fc.record({ tool: toolOptions, rt: runtimeOptions }), async ({ tool, rt }) => {
      try {
        defineTool(tool as never);
      } catch (e) {
        expect(isValidationError(e), `defineTool threw ${String(e)}`).toBe(true);
      }
      let runtime;
      try {
        runtime = createRuntime({ ...(rt as object), store: memoryStore(), model: scriptedModel(['ok'], { loop: true }) } as never);
      } catch (e) {
        expect(isValidationError(e), `createRuntime threw ${String(e)}`).toBe(true);
        return;
      }
      try {
        const s = await bounded(runtime.openSession('s'), 'openSession');
        const got = await settlesTyped(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'hi' }), 'prompt');
        if (got.value) expectResult(got.value);
        await expectLogInvariants(runtime.store, 's');
      } finally {
        await bounded(runtime.close(), 'close');
      }
    });
  });
});
