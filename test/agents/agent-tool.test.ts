import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  isValidationError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type AnyTool,
  type EventRecord,
  type EventStore,
  type ScriptedStep,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { logOf, ofCall, storeWithAppend } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// Sub-agents as tools: agentTool runs its agent in a child session; recovery resumes it, never uncertain.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const hangForever =
  (started?: { resolve(): void }): ScriptedStep =>
  () => {
    started?.resolve();
    return { text: 'never', delayMs: 3_600_000 };
  };
const ask = (id: string, input: string): ScriptedStep => ({ toolCalls: [{ id, name: 'researcher', arguments: { input } }] });
const CHILD = 's/r/1/c1';

/** A parent (the default agent) with the researcher as a tool (`as` it, e.g. spread into defineTool); both models scripted. */
function tree(parentSteps: ScriptedStep[], childSteps: ScriptedStep[], store: EventStore, as = (tool: AnyTool) => tool) {
  const childModel = scriptedModel(childSteps, { modelId: 'researcher-model' });
  const researcher = defineAgent({ name: 'researcher', instructions: 'You research.', model: childModel });
  const parentModel = scriptedModel(parentSteps);
  const runtime = createRuntime({ store, model: parentModel, tools: [as(agentTool(researcher))] });
  return { runtime, parentModel, childModel };
}

describe('agentTool', () => {
  it("a call runs the agent in a child session of its own log, named after the call, whose answer is the call's result", async () => {
    const store = memoryStore();
    const { runtime, parentModel, childModel } = tree([ask('c1', 'tea?'), 'Tea is a drink.'], ['tea: a drink'], store);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'what is tea?' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect(childModel.requests[0]!.messages).toEqual([
      { role: 'system', content: 'You research.' },
      { role: 'user', content: 'tea?' },
    ]);
    expect(parentModel.requests[0]!.tools.find((t) => t.name === 'researcher')!.parameters).toMatchObject({
      properties: { input: { type: 'string' } },
    });
    const log = await logOf(store, 's');
    expect(ofCall(log, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ kind: 'completed', content: 'tea: a drink' });
    const child = await logOf(store, CHILD);
    const parent = { sessionId: 's', runId: 'r', callId: 'c1', seq: ofCall(log, 'tool/call', 'c1')[0]!.seq };
    expect(child.find((e) => e.type === 'session/attached')!.payload).toMatchObject({ agent: 'researcher', parent });
    expect(child.find((e) => e.type === 'run/start')!.payload).toMatchObject({ runId: 'answer', agent: 'researcher', parent });
  });

  it("a child agent's structured output is the call's result as JSON", async () => {
    const store = memoryStore();
    const childModel = scriptedModel([JSON.stringify({ facts: ['hot'] })]);
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'r',
      model: childModel,
      output: z.object({ facts: z.array(z.string()) }),
    });
    const runtime = createRuntime({ store, model: scriptedModel([ask('c1', 'tea?'), 'ok']), tools: [agentTool(researcher)] });
    cleanups.push(() => runtime.close());
    await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    const outcome = ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'completed', structured: { facts: ['hot'] }, content: '{"facts":["hot"]}' });
  });
});

describe('an agentTool spread into defineTool', () => {
  // defineTool({ ...tool, timeoutMs }) is how a defined tool is given other options (docs/guarantees.md)
  const respread = (tool: AnyTool) => defineTool({ ...tool, description: 'Asks the researcher for facts.', timeoutMs: 60_000 });

  it('stays an agent tool with the new options: its call runs the agent in a child session, whose answer is the result', async () => {
    const store = memoryStore();
    const { runtime, parentModel, childModel } = tree([ask('c1', 'tea?'), 'Tea is a drink.'], ['tea: a drink'], store, respread);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'what is tea?' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect(parentModel.requests[0]!.tools.find((t) => t.name === 'researcher')!.description).toBe('Asks the researcher for facts.');
    expect(childModel.requests[0]!.messages).toEqual([
      { role: 'system', content: 'You research.' },
      { role: 'user', content: 'tea?' },
    ]);
    const log = await logOf(store, 's');
    expect(ofCall(log, 'tool/call', 'c1')[0]!.payload).toMatchObject({ name: 'researcher', resumable: true });
    expect(ofCall(log, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ kind: 'completed', content: 'tea: a drink' });
    const childStart = (await logOf(store, CHILD)).find((e) => e.type === 'run/start')!;
    expect(childStart.payload).toMatchObject({ runId: 'answer', agent: 'researcher', parent: { sessionId: 's', callId: 'c1' } });
  });

  it('its needsApproval holds the call for approval: the child runs once it is approved', async () => {
    const store = memoryStore();
    const approved = (tool: AnyTool) => defineTool({ ...tool, needsApproval: true });
    const { runtime, childModel } = tree([ask('c1', 'tea?'), 'Tea is a drink.'], ['tea: a drink'], store, approved);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'what is tea?' });
    expect(r1).toMatchObject({ status: 'suspended', pendingRequest: { kind: 'approval', calls: [{ callId: 'c1', name: 'researcher' }] } });
    expect(childModel.requests).toHaveLength(0);
    const questionId = r1.pendingRequest!.questionId;
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId, answer: { decisions: { c1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect(childModel.requests).toHaveLength(1);
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'tea: a drink' });
  });

  it('its timeoutMs bounds the call: a child still running then is cancelled, and the call ends cancelled', async () => {
    const store = memoryStore();
    const childCalled = deferred();
    const bounded = (tool: AnyTool) => defineTool({ ...tool, timeoutMs: 100 });
    const { runtime } = tree([ask('c1', 'tea?'), 'Gave up.'], [hangForever(childCalled)], store, bounded);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'what is tea?' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Gave up.' });
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({
      kind: 'cancelled',
      partialContent: 'the researcher agent was cancelled: timed out after 100 ms',
    });
    expect((await logOf(store, CHILD)).filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['cancelled']);
  });

  it("with parameters of its own, the child's prompt is the call's arguments as JSON", async () => {
    const store = memoryStore();
    const topical = (tool: AnyTool) => defineTool({ ...tool, parameters: z.object({ topic: z.string() }) });
    const parentSteps: ScriptedStep[] = [{ toolCalls: [{ id: 'c1', name: 'researcher', arguments: { topic: 'tea' } }] }, 'ok'];
    const { runtime, childModel } = tree(parentSteps, ['tea: a drink'], store, topical);
    cleanups.push(() => runtime.close());
    await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(childModel.requests[0]!.messages.at(-1)).toEqual({ role: 'user', content: '{"topic":"tea"}' });
  });

  it('an execute or reconcile of its own is refused: its calls run its agent', () => {
    const researcher = defineAgent({ name: 'researcher', instructions: 'r' });
    const tool = agentTool(researcher);
    for (const own of [{ execute: () => 'mine' }, { reconcile: () => undefined }]) {
      let error: unknown;
      try {
        defineTool({ ...tool, ...own });
      } catch (e) {
        error = e;
      }
      expect(isValidationError(error) && error.issues.map((i) => i.path[0])).toEqual([Object.keys(own)[0]]);
      expect(String(error)).toMatch(/runs the researcher agent/);
    }
  });

  it('an agentTool copied with an execute of its own (no defineTool) is refused by createRuntime, never silently run as the agent', () => {
    const researcher = defineAgent({ name: 'researcher', instructions: 'r' });
    const copied = { ...agentTool(researcher), execute: () => 'mine' };
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel([]), tools: [copied] })).toThrow(
      /tool researcher runs the researcher agent \(an agentTool\): its calls run the agent, not an execute of yours/,
    );
  });
});

/**
 * The hand-over's crash points, in-process: the first runtime is abandoned (never closed) where a
 * killed process would stop; a second one on the same LMDB path continues the parent's run.
 */
describe('recovery of an agent call', () => {
  async function crashAt(setup: (dir: string) => Promise<void>, as?: (tool: AnyTool) => AnyTool) {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    await setup(dir.path);
    // life 2: the child's model answers (if it is asked), then the parent's
    const childSteps: ScriptedStep[] = ['answer from life 2'];
    const { runtime, parentModel, childModel } = tree(['Done.'], childSteps, lmdbStore({ path: dir.path }), as);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect(s.recovery.uncertainToolCalls).toEqual([]);
    const r = await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    const parentLog = await logOf(runtime.store, 's');
    const childLog = await logOf(runtime.store, CHILD);
    return { r, parentModel, childModel, parentLog, childLog, store: runtime.store };
  }

  const expectOnce = (parentLog: EventRecord[], childLog: EventRecord[]) => {
    expect(ofCall(parentLog, 'tool/call', 'c1')).toHaveLength(1);
    expect(ofCall(parentLog, 'tool/result', 'c1')).toHaveLength(1);
    // the child's run was started once (its run-open event), whatever resumed it
    expect(childLog.filter((e) => e.type === 'run/start' && e.payload.kind === 'prompt')).toHaveLength(1);
  };

  it('before the child opened: the call starts the child then, once, and is not uncertain', async () => {
    const { r, childModel, parentLog, childLog } = await crashAt(async (dir) => {
      const hung = deferred();
      // the child's first append never lands: the process stops before the child opened
      const inner = lmdbStore({ path: dir });
      const store = storeWithAppend(inner, (id, ...rest) =>
        id === CHILD ? (hung.resolve(), new Promise(() => {})) : inner.append(id, ...rest),
      );
      const { runtime } = tree([ask('c1', 'tea?')], [], store);
      void (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await hung.promise;
    });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Done.', uncertainCalls: [] });
    expect(childModel.requests).toHaveLength(1);
    expect(ofCall(parentLog, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'answer from life 2' });
    expectOnce(parentLog, childLog);
  });

  it("while the child ran: the child's open run is continued, not started again", async () => {
    const { r, childModel, parentLog, childLog } = await crashAt(async (dir) => {
      const childCalled = deferred();
      const { runtime } = tree([ask('c1', 'tea?')], [hangForever(childCalled)], lmdbStore({ path: dir }));
      void (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await childCalled.promise;
    });
    expect(r).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
    expect(childModel.requests).toHaveLength(1);
    expect(childLog.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
    expect(ofCall(parentLog, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'answer from life 2' });
    expectOnce(parentLog, childLog);
  });

  it("after the child finished, before the parent committed its answer: the child's committed answer is taken, without a model call", async () => {
    const { r, childModel, parentLog, childLog } = await crashAt(async (dir) => {
      const hung = deferred();
      const inner = lmdbStore({ path: dir });
      // the parent's append of the call's result never lands
      const store = storeWithAppend(inner, (id, epoch, seq, drafts) =>
        id === 's' && drafts.some((d) => d.type === 'tool/result')
          ? (hung.resolve(), new Promise(() => {}))
          : inner.append(id, epoch, seq, drafts),
      );
      const { runtime } = tree([ask('c1', 'tea?')], ['answer from life 1'], store);
      void (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await hung.promise;
    });
    expect(r).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
    expect(childModel.requests).toHaveLength(0);
    expect(ofCall(parentLog, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'answer from life 1' });
    expectOnce(parentLog, childLog);
  });

  it("an agentTool spread into defineTool is resumed alike: the child's open run is continued, the call never uncertain", async () => {
    const respread = (tool: AnyTool) => defineTool({ ...tool, timeoutMs: 60_000 });
    const { r, childModel, parentLog, childLog } = await crashAt(async (dir) => {
      const childCalled = deferred();
      const { runtime } = tree([ask('c1', 'tea?')], [hangForever(childCalled)], lmdbStore({ path: dir }), respread);
      void (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await childCalled.promise;
    }, respread);
    expect(r).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
    expect(childModel.requests).toHaveLength(1);
    expect(childLog.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
    expect(ofCall(parentLog, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: 'answer from life 2' });
    expectOnce(parentLog, childLog);
  });

  it('after the parent committed the answer: the child is not opened again', async () => {
    let attachedBefore = 0;
    const { r, childModel, parentLog, childLog } = await crashAt(async (dir) => {
      const parentCalled = deferred();
      const store = lmdbStore({ path: dir });
      const { runtime } = tree([ask('c1', 'tea?'), hangForever(parentCalled)], ['answer from life 1'], store);
      void (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
      await parentCalled.promise;
      attachedBefore = (await logOf(store, CHILD)).filter((e) => e.type === 'session/attached').length;
    });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Done.' });
    expect(childModel.requests).toHaveLength(0);
    expect(childLog.filter((e) => e.type === 'session/attached')).toHaveLength(attachedBefore);
    expectOnce(parentLog, childLog);
  });
});

describe('control flows down to a child', () => {
  it("the parent's cancel cancels the running child: both runs end cancelled", async () => {
    const store = memoryStore();
    const childCalled = deferred();
    const { runtime } = tree([ask('c1', 'tea?')], [hangForever(childCalled)], store);
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await childCalled.promise;
    await s.requestCancel('user');
    expect((await running).status).toBe('cancelled');
    const childEnd = (await logOf(store, CHILD)).filter((e) => e.type === 'run/end');
    expect(childEnd.map((e) => e.payload.status)).toEqual(['cancelled']);
  });

  it("the runtime's kill switch reaches the children: the child's run ends cancelled", async () => {
    const store = memoryStore();
    const childCalled = deferred();
    const kill = new AbortController();
    const childModel = scriptedModel([hangForever(childCalled)]);
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const runtime = createRuntime({
      store,
      model: scriptedModel([ask('c1', 'tea?')]),
      tools: [agentTool(researcher)],
      killSwitch: kill.signal,
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await childCalled.promise;
    kill.abort();
    expect((await running).status).toBe('cancelled');
    expect((await logOf(store, CHILD)).filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['cancelled']);
  });
});

describe('usage flows up from a child', () => {
  const u = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens, cachedInputTokens: 0 });

  it("a child's usage is in the call's result (its tool/result) and in the parent run's usage", async () => {
    const store = memoryStore();
    const { runtime } = tree(
      [
        { ...(ask('c1', 'tea?') as object), usage: u(10, 1) },
        { text: 'Done.', usage: u(10, 1) },
      ],
      [{ text: 'tea: a drink', usage: u(100, 20) }],
      store,
    );
    cleanups.push(() => runtime.close());
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(r.usage).toMatchObject({ inputTokens: 120, outputTokens: 22 });
    const outcome = ofCall(await logOf(store, 's'), 'tool/result', 'c1')[0]!.payload.outcome;
    expect(outcome).toMatchObject({ usage: { inputTokens: 100, outputTokens: 20 } });
  });

  it("a child's output tokens count against the parent's maxOutputTokens: the parent's run ends budget_exhausted after the call", async () => {
    const store = memoryStore();
    const childModel = scriptedModel([{ text: 'long answer', usage: u(5, 50) }]);
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const parentModel = scriptedModel([{ ...(ask('c1', 'tea?') as object), usage: u(5, 1) }, 'never asked']);
    const runtime = createRuntime({ store, model: parentModel, tools: [agentTool(researcher)], budget: { maxOutputTokens: 30 } });
    cleanups.push(() => runtime.close());
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxOutputTokens' });
    expect(parentModel.requests).toHaveLength(1);
  });
});
