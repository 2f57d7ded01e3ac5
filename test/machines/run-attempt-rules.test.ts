import type { ToolCallIntent } from '../../src/contracts/calls.js';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createActor, waitFor } from 'xstate';
import { defineTool, scriptedModel } from '../../src/index.js';
import { callActor } from '../../src/actors/tool-call.js';
import type { ToolCallOutput } from '../../src/contracts/calls.js';
import type { CommitIntentOutput } from '../../src/actors/commit-intent.js';
import type { EndRunInput } from '../../src/actors/end-run.js';
import { toolBatchMachine } from '../../src/machines/tool-batch.machine.js';
import { deferred } from '../helpers/drafts.js';
import { fromPromise } from 'xstate';
import { runMachine } from '../../src/machines/run.machine.js';
import { runInput } from '../helpers/fake-batch.js';
import { LoopBudget } from '../../src/contracts/config.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';

import { ids, lmdbRuntime, logOf, sleep, typesOf } from '../helpers/runtime.js';

/** Fake phase actors for the run machine: a model that asks for one tool call, the rest trivial; `over` replaces any. */
function phaseActors(over: Record<string, unknown> = {}) {
  const ok = <T>(v: T) => fromPromise(async () => v);
  return {
    startRun: ok({ runStartSeq: 1 }),
    prepareContext: ok({}),
    callModel: ok({ kind: 'toolCalls', toolCalls: [{ id: 'c', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls' }),
    commitIntent: ok({ kind: 'rejected' }),
    commitResults: ok({ rejections: 0 }),
    verifyFinal: ok({ kind: 'accepted' }),
    commitFinal: ok({ finalMessageId: 'f' }),
    deliverFinal: ok({ kind: 'delivered' }),
    endRun: fromPromise(async ({ input }: { input: { result: ExecutionResult } }) => input.result),
    ...over,
  } as never;
}

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});

describe('a run attempt: cancels, errors, budgets and snapshots across the machines', () => {
  it('a cancel accepted while the final answer is being verified ends the run cancelled, committing and delivering no final', async () => {
    const verifying = deferred();
    const release = deferred();
    const delivered: string[] = [];
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['the answer']),
      finalVerifier: async () => {
        verifying.resolve();
        await release.promise;
        return undefined;
      },
      delivery: { deliver: async (f) => void delivered.push(f.content) },
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await verifying.promise;
    expect(await s.requestCancel()).toBe(true);
    release.resolve();
    const r = await running;
    const types = typesOf(await logOf(store, 's'));
    expect({ status: r.status, delivered, final: types.includes('final/message') }).toEqual({
      status: 'cancelled',
      delivered: [],
      final: false,
    });
  });

  it('snapshot() after a run still reports that run’s tool calls and cost, like its step', async () => {
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
      pricing: () => '0.5',
    });
    const s = await runtime.openSession('s');
    let during: { toolCalls: number; cost: string } | undefined;
    s.events$.subscribe((e) => {
      if (e.event.type === 'step_end' && (e.event as { step: number }).step === 1)
        during = { toolCalls: s.snapshot().toolCalls, cost: s.snapshot().cost };
    });
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const after = s.snapshot();
    expect(during).toEqual({ toolCalls: 1, cost: '0.5' });
    expect({ step: after.step, toolCalls: after.toolCalls, cost: after.cost }).toEqual({ step: 2, toolCalls: 1, cost: '1' });
  });

  it('maxToolCalls counts the tool calls of the whole run, across its respond attempts', async () => {
    const executed: number[] = [];
    const pay = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({ n: z.number() }),
      needsApproval: true,
      execute: ({ n }) => (executed.push(n), `paid ${n}`),
    });
    const model = scriptedModel([
      { toolCalls: [{ id: 'p1', name: 'pay', arguments: { n: 1 } }] },
      { toolCalls: [{ id: 'p2', name: 'pay', arguments: { n: 2 } }] },
      { toolCalls: [{ id: 'p3', name: 'pay', arguments: { n: 3 } }] },
      'done',
    ]);
    const { runtime } = lmdbRuntime({ model, tools: [pay], budget: { maxToolCalls: 2 } });
    const s = await runtime.openSession('s');
    let r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay thrice' });
    let n = 1;
    while (r.status === 'suspended' && n < 6) {
      n++;
      const id = (r.pendingRequest as { calls: { callId: string }[] }).calls[0]!.callId;
      r = await s.execute({
        kind: 'respond',
        runId: 'r',
        attemptId: `a${n}`,
        questionId: r.pendingRequest!.questionId,
        answer: { decisions: { [id]: 'approve' } },
      });
    }
    expect(executed.length).toBeLessThanOrEqual(2);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxToolCalls' });
  });

  it('a model step that fails after the model asked for tools leaves no assistant tool calls without results on the surface', async () => {
    // a tool whose dynamic `resources` throws for some arguments (an app bug): the step fails
    const files = defineTool({
      name: 'files',
      description: '',
      parameters: z.object({ path: z.string().optional() }),
      resources: (a) => [`file:${a.path!.toLowerCase()}`],
      execute: () => 'ok',
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'files', arguments: {} }] }, 'second answer']);
    const { runtime } = lmdbRuntime({ model, tools: [files] });
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r1.status).toBe('failed');
    await s.execute({ kind: 'prompt', ...ids(), message: 'again' });
    // the next request sends the failed step's assistant message with its tool call, and no result for it
    const sent = model.requests[1]!.messages;
    const asked = sent.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : []));
    const answered = sent.filter((m) => m.role === 'tool').map((m) => m.toolCallId);
    expect(asked.filter((id) => !answered.includes(id))).toEqual([]);
  });

  // The intent commit itself refuses to suspend once cancelled (the run ends cancelled with the
  // calls answered skipped). A suspension being committed when the CANCEL reached the machine is
  // settled too: the run ends cancelled and its end answers the model's tool calls `skipped`.
  it('a CANCEL that reaches the machine while a suspension is committed ends the attempt cancelled, its calls answered skipped at its end', async () => {
    const gate = deferred<CommitIntentOutput>();
    let ending: EndRunInput | undefined;
    const machine = runMachine.provide({
      actors: phaseActors({
        commitIntent: fromPromise(async () => gate.promise),
        endRun: fromPromise(async ({ input }: { input: EndRunInput }) => ((ending = input), input.result)),
      }),
    });
    const actor = createActor(machine, { input: runInput() }).start();
    await waitFor(actor, (x) => x.matches('committingIntent'));
    actor.send({ type: 'CANCEL' });
    gate.resolve({
      kind: 'suspended',
      pendingRequest: {
        kind: 'approval',
        questionId: 'q',
        calls: [{ callId: 'c', name: 'echo', arguments: {} }],
        expiresAt: Date.now() + 1000,
      } as never,
    });
    const snap = await waitFor(actor, (x) => x.status === 'done');
    expect(snap.output).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(snap.output!.pendingRequest).toBeUndefined();
    expect(ending).toMatchObject({ unrun: [{ callId: 'c', name: 'echo' }], openStep: {} });
  });

  it('snapshot() while a respond attempt runs reports the session executing, no longer suspended on the answered request', async () => {
    const started = deferred();
    const gate = deferred();
    const pay = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({}),
      needsApproval: true,
      execute: async () => (started.resolve(), await gate.promise, 'paid'),
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'done']),
      tools: [pay],
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(s.snapshot().status).toBe('suspended');
    const running = s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    await started.promise;
    const during = s.snapshot();
    gate.resolve();
    await running;
    expect({ status: during.status, phase: during.phase, pending: during.pending }).toEqual({
      status: 'executing',
      phase: 'runningTools',
      pending: undefined,
    });
  });

  it('a tool batch that errors stops the calls still running in it (their tools are aborted)', async () => {
    const aborted: string[] = [];
    const toolCall = callActor(async (input, ac) => {
      if (input.call.callId === 'bad') {
        await sleep(10);
        throw new Error('call actor crashed outside its tool');
      }
      // a long tool that honours its signal
      await new Promise<void>((resolve) => ac.onAbort(() => (aborted.push(input.call.callId), resolve())));
      return {
        callId: input.call.callId,
        name: input.call.name,
        outcome: { kind: 'cancelled', settled: true, partialContent: '', resourceLocks: [] },
        startedAt: 1,
        endedAt: 2,
      } as ToolCallOutput;
    });
    const calls: ToolCallIntent[] = ['slow', 'bad'].map((id) => ({
      callId: id,
      name: 'echo',
      arguments: {},
      mode: 'parallel',
      resources: [],
      idempotencyKey: `s/r/${id}`,
    }));
    const machine = runMachine.provide({
      actors: phaseActors({
        commitIntent: fromPromise(async () => ({ kind: 'intents', calls })),
        toolBatch: toolBatchMachine.provide({ actors: { toolCall } }),
      }),
    });
    const actor = createActor(machine, { input: runInput() }).start();
    const snap = await waitFor(actor, (x) => x.status === 'done');
    expect(snap.output!.status).toBe('failed');
    await sleep(20);
    expect(aborted).toEqual(['slow']);
  });

  it('a continue that inherits a spent budget ends budget_exhausted without calling the model', async () => {
    let modelCalls = 0;
    const machine = runMachine.provide({
      actors: phaseActors({
        startRun: fromPromise(async () => ({ runStartSeq: 9 })),
        callModel: fromPromise(async () => (modelCalls++, { kind: 'answer', content: 'x' })),
      }),
    });
    const input = runInput({
      kind: 'continue',
      runEpoch: 2,
      attemptId: 'a2',
      messages: [],
      startStep: 1,
      budget: LoopBudget.parse({ maxToolCalls: 2 }),
      spent: { toolCalls: 2, usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 }, cost: '0', recoveries: 0, corrections: 0 },
    });
    const actor = createActor(machine, { input }).start();
    const snap = await waitFor(actor, (x) => x.status === 'done');
    expect(snap.output).toMatchObject({ status: 'budget_exhausted', budget: 'maxToolCalls' });
    expect(modelCalls).toBe(0);
  });
});
