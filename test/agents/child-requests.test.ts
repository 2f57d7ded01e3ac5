import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  memoryStore,
  scriptedModel,
  type EventStore,
  type ScriptedStep,
} from '../../src/index.js';
import { summarize } from '../../src/cli/format.js';
import { chargeTool } from '../helpers/agent-tree.js';
import { deferred } from '../helpers/drafts.js';
import { logOf, ofCall } from '../helpers/runtime.js';

// A child's approval or question suspends its parent with a pending request naming the child
// (pendingRequest.path); the parent's respond routes the answer down, and the child's answer flows
// back up as the call's result, exactly once. (A cancelled parent: parent-cancel.test.ts.)

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CHILD = 's/r/1/c1';
const callTo = (id: string, name: string, input: string): ScriptedStep => ({ toolCalls: [{ id, name, arguments: { input } }] });

const charge = (id: string, amount: number): ScriptedStep => ({ toolCalls: [{ id, name: 'charge', arguments: { amount } }] });

/** A parent (the default agent) calling a payer agent whose charge needs approval. */
function payerTree(store: EventStore, parentSteps: ScriptedStep[], childSteps: ScriptedStep[], ran: string[]) {
  const childModel = scriptedModel(childSteps, { modelId: 'payer-model' });
  const payer = defineAgent({ name: 'payer', instructions: 'You pay.', model: childModel, tools: [chargeTool(ran)] });
  const runtime = createRuntime({ store, model: scriptedModel(parentSteps), tools: [agentTool(payer, { mode: 'parallel' })] });
  cleanups.push(() => runtime.close());
  return { runtime, childModel };
}

describe("a child's request suspends its parent", () => {
  it("a child's approval suspends the parent with a request naming the child; the parent's respond routes the answer down and the child's answer is the call's result, once", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const { runtime } = payerTree(store, [callTo('c1', 'payer', 'pay 5'), 'Paid.'], [charge('k1', 5), 'charged 5 for you'], ran);
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'pay' });
    expect(r1).toMatchObject({
      status: 'suspended',
      pendingRequest: { kind: 'approval', questionId: 'approval-k1', path: [CHILD], calls: [{ callId: 'k1', name: 'charge' }] },
    });
    expect(s.pendingRequest).toEqual(r1.pendingRequest);
    expect(ran).toEqual([]);
    // the parent's call has no result while its child waits; `actorloop log` names the child that asked
    const waiting = await logOf(store, 's');
    expect(ofCall(waiting, 'tool/result', 'c1')).toEqual([]);
    expect(summarize(waiting.find((e) => e.type === 'approval/requested')!)).toBe(`approval approval-k1 (asked by ${CHILD})`);
    const r2 = await s.execute({ kind: 'respond', questionId: 'approval-k1', answer: { decisions: { k1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'Paid.' });
    expect(ran).toEqual([`${CHILD}:5`]);
    const results = ofCall(await logOf(store, 's'), 'tool/result', 'c1');
    expect(results).toHaveLength(1);
    expect(results[0]!.payload.outcome).toMatchObject({ kind: 'completed', content: 'charged 5 for you', isError: false });
    // the child recorded its own decision, as any respond does
    const childLog = await logOf(store, CHILD);
    expect(childLog.find((e) => e.type === 'approval/decided')!.payload).toMatchObject({
      questionId: 'approval-k1',
      decisions: { k1: 'approve' },
    });
    expect(childLog.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['suspended', 'succeeded']);
  });

  it('a child that asks again under the same question id (a provider numbering call ids per message) gets the new answer, not the first', async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const { runtime } = payerTree(
      store,
      [callTo('c1', 'payer', 'pay twice'), 'Paid.'],
      [charge('k1', 1), charge('k1', 2), 'charged twice'],
      ran,
    );
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'pay' });
    expect(r1.pendingRequest).toMatchObject({ questionId: 'approval-k1', calls: [{ arguments: { amount: 1 } }] });
    const r2 = await s.execute({ kind: 'respond', questionId: 'approval-k1', answer: { decisions: { k1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'suspended', pendingRequest: { questionId: 'approval-k1', calls: [{ arguments: { amount: 2 } }] } });
    expect(ran).toEqual([`${CHILD}:1`]);
    const r3 = await s.execute({ kind: 'respond', questionId: 'approval-k1', answer: { decisions: { k1: 'deny' } } });
    expect(r3).toMatchObject({ status: 'succeeded', finalMessage: 'Paid.' });
    expect(ran).toEqual([`${CHILD}:1`]);
    const decided = (await logOf(store, CHILD)).filter((e) => e.type === 'approval/decided').map((e) => e.payload.decisions);
    expect(decided).toEqual([{ k1: 'approve' }, { k1: 'deny' }]);
  });

  it("a child's call approved through the parent's session.approve(callId) resumes both", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const { runtime } = payerTree(store, [callTo('c1', 'payer', 'pay 7'), 'Paid.'], [charge('k1', 7), 'charged 7'], ran);
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'pay' })).status).toBe('suspended');
    const receipt = await s.approve('k1');
    expect(receipt).toMatchObject({ questionId: 'approval-k1', undecided: [] });
    expect(await receipt.run!.result).toMatchObject({ status: 'succeeded', finalMessage: 'Paid.' });
    expect(ran).toEqual([`${CHILD}:7`]);
  });

  it("a child's question suspends the parent; the answer reaches the child's askUser call", async () => {
    const store = memoryStore();
    const childModel = scriptedModel([
      { toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'Which colour?' } }] },
      'You said blue.',
    ]);
    const painter = defineAgent({ name: 'painter', instructions: 'You paint.', model: childModel });
    const runtime = createRuntime({
      store,
      askUser: true,
      model: scriptedModel([callTo('c1', 'painter', 'paint'), 'Painted.']),
      tools: [agentTool(painter)],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'paint' });
    expect(r1.pendingRequest).toMatchObject({
      kind: 'question',
      questionId: 'question-q1',
      callId: 'q1',
      question: 'Which colour?',
      path: [CHILD],
    });
    const r2 = await s.execute({ kind: 'respond', questionId: 'question-q1', answer: 'blue' });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'Painted.' });
    expect(childModel.requests[1]!.messages.at(-1)).toMatchObject({ role: 'tool', content: 'blue' });
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'You said blue.' });
  });

  it("a grandchild's request suspends the root with the whole path, and the answer is routed down two levels", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const payer = defineAgent({
      name: 'payer',
      instructions: 'You pay.',
      model: scriptedModel([charge('k1', 3), 'charged 3']),
      tools: [chargeTool(ran)],
    });
    const manager = defineAgent({
      name: 'manager',
      instructions: 'You manage.',
      model: scriptedModel([callTo('m1', 'payer', 'pay 3'), 'the payer charged 3']),
      tools: [agentTool(payer)],
    });
    const runtime = createRuntime({
      store,
      model: scriptedModel([callTo('c1', 'manager', 'handle it'), 'Handled.']),
      tools: [agentTool(manager)],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const grandchild = `${CHILD}/answer/1/m1`;
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(r1.pendingRequest).toMatchObject({ kind: 'approval', questionId: 'approval-k1', path: [CHILD, grandchild] });
    const r2 = await s.execute({ kind: 'respond', questionId: 'approval-k1', answer: { decisions: { k1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'Handled.' });
    expect(ran).toEqual([`${grandchild}:3`]);
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'the payer charged 3' });
    expect(ofCall(await logOf(store, CHILD), 'tool/result', 'm1')).toHaveLength(1);
  });

  it('two parallel children that ask: the parent shows the first request, then the next once the first is answered', async () => {
    const store = memoryStore();
    const ran: string[] = [];
    // one payer agent: each child gets its script step in turn (child 1: charge 1, child 2: charge 2, then their answers)
    const { runtime } = payerTree(
      store,
      [
        {
          toolCalls: [
            { id: 'c1', name: 'payer', arguments: { input: 'pay 1' } },
            { id: 'c2', name: 'payer', arguments: { input: 'pay 2' } },
          ],
        },
        'Both paid.',
      ],
      [charge('k1', 1), charge('k2', 2), 'charged one', 'charged two'],
      ran,
    );
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'pay both' });
    expect(r1.pendingRequest).toMatchObject({ questionId: 'approval-k1', path: ['s/r/1/c1'] });
    const r2 = await s.execute({ kind: 'respond', questionId: 'approval-k1', answer: { decisions: { k1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'suspended', pendingRequest: { questionId: 'approval-k2', path: ['s/r/1/c2'] } });
    expect(ran).toEqual(['s/r/1/c1:1']);
    const r3 = await s.execute({ kind: 'respond', questionId: 'approval-k2', answer: { decisions: { k2: 'deny' } } });
    expect(r3).toMatchObject({ status: 'succeeded', finalMessage: 'Both paid.' });
    expect(ran).toEqual(['s/r/1/c1:1']);
    const log = await logOf(store, 's');
    expect(ofCall(log, 'tool/result', 'c1')).toHaveLength(1);
    expect(ofCall(log, 'tool/result', 'c2')).toHaveLength(1);
    // one step: its calls' results and one step/end
    expect(log.filter((e) => e.type === 'step/end' && e.step === 1)).toHaveLength(1);
  });
});

describe("the parent's stop and detach reach its running child", () => {
  /** A researcher whose first step runs `slow` (held until released), with text. */
  function slowTree(store: EventStore, childSteps: ScriptedStep[]) {
    const started = deferred();
    const release = deferred();
    const slow = defineTool({
      name: 'slow',
      description: 'slow lookup',
      parameters: z.object({}),
      mode: 'parallel',
      execute: async () => {
        started.resolve();
        await release.promise;
        return 'looked up';
      },
    });
    const childModel = scriptedModel(childSteps);
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel, tools: [slow] });
    const runtime = createRuntime({
      store,
      model: scriptedModel([callTo('c1', 'researcher', 'tea?'), 'Tea is a drink.']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    return { runtime, started, release, childModel };
  }
  const firstStep: ScriptedStep = { text: 'halfway there', toolCalls: [{ id: 'l1', name: 'slow', arguments: {} }] };

  it("a stop of the parent stops the running child after its round; the call's result is what the child had", async () => {
    const store = memoryStore();
    const { runtime, started, release, childModel } = slowTree(store, [firstStep, 'never asked']);
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await started.promise;
    await s.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s.sessionInstanceId,
      interactionId: 'r',
      expectedRunEpoch: 1,
      idempotencyKey: 'stop-1',
    });
    release.resolve();
    expect((await running).status).toBe('stopped');
    expect(childModel.requests).toHaveLength(1);
    const childEnds = (await logOf(store, CHILD)).filter((e) => e.type === 'run/end');
    expect(childEnds.map((e) => e.payload.status)).toEqual(['stopped']);
    const result = ofCall(await logOf(store, 's'), 'tool/result', 'c1');
    expect(result).toHaveLength(1);
    expect(result[0]!.payload.outcome).toMatchObject({ kind: 'completed', content: expect.stringContaining('what it had: halfway there') });
  });

  it('a detach of the parent detaches the running child after its step; the call stays open and the next attempt resumes the child', async () => {
    const store = memoryStore();
    const { runtime, started, release, childModel } = slowTree(store, [firstStep, 'tea: a drink']);
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await started.promise;
    expect(s.requestDetach()).toBe(true);
    release.resolve();
    expect((await running).status).toBe('detached');
    expect(childModel.requests).toHaveLength(1);
    expect((await logOf(store, CHILD)).filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['detached']);
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1')).toEqual([]);
    const resumed = await s.execute({ kind: 'continue', runId: 'r', attemptId: 'r2' });
    expect(resumed).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect(childModel.requests).toHaveLength(2);
    const result = ofCall(await logOf(store, 's'), 'tool/result', 'c1');
    expect(result).toHaveLength(1);
    expect(result[0]!.payload.outcome).toMatchObject({ content: 'tea: a drink' });
    expect(resumed.uncertainCalls).toEqual([]);
  });
});
