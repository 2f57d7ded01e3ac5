import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ModelProvider, ModelRequest, ModelResponse } from '../../src/contracts/model.js';
import { defineTool, isExecutionBusy, isValidationError, scriptedModel } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { ids, lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';
import { unansweredInRequest } from '../helpers/unanswered.js';

// Approvals: a call that needs approval suspends its run; respond decides each call.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('approvals', () => {
  const pay = defineTool({
    name: 'pay',
    description: '',
    parameters: z.object({ amount: z.number() }),
    needsApproval: (a) => a.amount > 10,
    execute: ({ amount }) => `paid ${amount}`,
  });

  it('approve: the run suspends before the call, then respond runs it', async () => {
    const executed: number[] = [];
    const payT = defineTool({
      ...pay,
      parameters: z.object({ amount: z.number() }),
      needsApproval: (a) => a.amount > 10,
      execute: ({ amount }) => (executed.push(amount), `paid ${amount}`),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'p1', name: 'pay', arguments: { amount: 50 } },
            { id: 'p2', name: 'pay', arguments: { amount: 5 } },
          ],
        },
        'paid both',
      ]),
      tools: [payT],
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r).toMatchObject({
      outcome: 'suspended',
      status: 'suspended',
      pendingRequest: { kind: 'approval', calls: [{ callId: 'p1', name: 'pay', arguments: { amount: 50 } }] },
    });
    expect(executed).toEqual([]);
    const busy = await s.execute({ kind: 'prompt', ...ids(), message: 'other' }).catch((e: unknown) => e);
    expect(busy).toSatisfy(isExecutionBusy);
    const q = r.pendingRequest!.questionId;
    // nothing runs: the error says the run is suspended on which request, and what to call
    expect(busy).toMatchObject({ state: 'suspended', activeRunId: 'r', questionId: q });
    expect((busy as Error).message).toContain(`run r is suspended, waiting for the answer to ${q}`);
    expect((busy as Error).message).toContain("kind: 'respond'");
    expect((busy as Error).message).not.toContain('busy executing');
    // decisions for calls the approval did not ask about (unknown, or one that needs none) are refused by name
    const respond = (answer: unknown) => s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer });
    for (const bad of [
      { decisions: { p1: 'approve', bogus: 'approve' } },
      { decisions: { p1: 'approve', p2: 'deny' } },
      { decisions: {}, extra: 1 },
    ])
      await expect(respond(bad)).rejects.toSatisfy(isValidationError);
    const r2 = await respond({ decisions: { p1: 'approve' } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'paid both' });
    expect(executed.sort()).toEqual([5, 50]);
    const log = await logOf(store, 's');
    expect(log.find((e) => e.type === 'approval/decided')!.payload).toMatchObject({
      questionId: q,
      decisions: { p1: 'approve' },
      timedOut: false,
    });
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runEpoch)).toEqual([1, 2]);
  });

  it('deny (or leaving a call out) gives an error result the model reads; nothing runs', async () => {
    const executed: number[] = [];
    const payT = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({ amount: z.number() }),
      needsApproval: true,
      execute: ({ amount }) => (executed.push(amount), 'paid'),
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { id: 'p1', name: 'pay', arguments: { amount: 50 } },
          { id: 'p2', name: 'pay', arguments: { amount: 60 } },
        ],
      },
      'ok, not paid',
    ]);
    const { runtime, store } = lmdbRuntime({ model, tools: [payT] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    await s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p1: 'deny' } },
    });
    expect(executed).toEqual([]);
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome);
    expect(results).toMatchObject([{ isError: true, content: expect.stringContaining('denied') }, { isError: true }]);
    expect(model.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId)).toEqual(['p1', 'p2']);
  });

  it('an answer after approvalTimeoutMs counts as denied', async () => {
    const executed: number[] = [];
    const payT = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({ amount: z.number() }),
      execute: ({ amount }) => (executed.push(amount), 'paid'),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 1 } }] }, 'too late']),
      tools: [payT],
      approvalFor: ['tool:pa*'],
      config: { approvalTimeoutMs: 20 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await sleep(40);
    await s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    expect(executed).toEqual([]);
    const decided = (await logOf(store, 's')).find((e) => e.type === 'approval/decided')!;
    expect(decided.payload).toMatchObject({ timedOut: true, decisions: { p1: 'deny' } });
  });

  it('a cancel arriving while a model step asks for approval leaves no unanswered tool calls on the surface', async () => {
    const gate = deferred();
    const requests: ModelRequest[] = [];
    let n = 0;
    // a provider whose response was already complete when the cancel came (it does not abort)
    const model: ModelProvider = {
      modelId: 'm',
      async call(req): Promise<ModelResponse> {
        requests.push({ ...req, messages: [...req.messages] });
        n++;
        if (n === 1) {
          await gate.promise;
          return {
            message: { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'deploy', arguments: '{}' }] },
            finishReason: 'tool_calls',
          };
        }
        return { message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' };
      },
    };
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => 'deployed',
    });
    const { runtime } = lmdbRuntime({ model, tools: [deploy] });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    while (n === 0) await sleep(5);
    expect(await s.requestCancel()).toBe(true);
    gate.resolve();
    const r = await p;
    expect(r.status).toBe('cancelled');
    // the run is settled: nothing will ever answer c1, yet the model sees the call on the next run
    await s.execute({ kind: 'prompt', ...ids(), message: 'next' });
    expect(unansweredInRequest(requests[1]!.messages)).toEqual([]);
  });
});
