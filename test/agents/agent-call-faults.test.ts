import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  memoryStore,
  scriptedModel,
  type AnyTool,
  type EventStore,
  type ModelProvider,
  type ScriptedStep,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { logOf, storeWithAppend } from '../helpers/runtime.js';

// The parent-child hand-over of an agentTool call under a failing store, a cancel and a takeover
// (each found by the simulator's tree family, test/sim/tree-simulate.ts).

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CHILD = 's/r/1/c1';
const ask: ScriptedStep = { toolCalls: [{ id: 'c1', name: 'researcher', arguments: { input: 'tea?' } }] };

function tree(store: EventStore, childSteps: ScriptedStep[], o: { tools?: AnyTool[]; cancelGraceMs?: number } = {}) {
  const researcher = defineAgent({
    name: 'researcher',
    instructions: 'r',
    model: scriptedModel(childSteps, { modelId: 'researcher-model' }),
    ...(o.tools ? { tools: o.tools } : {}),
  });
  const runtime = createRuntime({
    store,
    model: scriptedModel([ask, 'Done.']),
    tools: [agentTool(researcher)],
    ...(o.cancelGraceMs !== undefined ? { config: { cancelGraceMs: o.cancelGraceMs } } : {}),
  });
  cleanups.push(() => runtime.close().catch(() => undefined));
  return runtime;
}

/** `inner` with the reads of `match` (getHead, getEventById) of the child waiting for `gate` once. */
function gatedReads(inner: EventStore, gate: Promise<void>, reached: () => void): EventStore {
  let once = false;
  const hold = async <T>(id: string, what: string, f: () => Promise<T>): Promise<T> => {
    if (id === CHILD && what === 'run-open:answer' && !once) {
      once = true;
      reached();
      await gate;
    }
    return f();
  };
  return {
    ...storeWithAppend(inner, (...a) => inner.append(...a)),
    getEventById: (id, e) => hold(id, e, () => inner.getEventById(id, e)),
  };
}

describe('the hand-over of an agent call', () => {
  it("a child result its log does not hold is not the call's answer: the child is opened again and its run settled from its log", async () => {
    const inner = memoryStore();
    let failed = false;
    // the child's closing append fails before it commits, once: its run stays open in its log
    const store = storeWithAppend(inner, (id, epoch, seq, drafts) => {
      if (id === CHILD && !failed && drafts.some((d) => d.type === 'run/end')) {
        failed = true;
        return Promise.reject(new Error('transient: append failed before commit'));
      }
      return inner.append(id, epoch, seq, drafts);
    });
    const runtime = tree(store, ['first answer', 'second answer']);
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Done.' });
    expect(failed).toBe(true);
    const child = await logOf(inner, CHILD);
    const ends = child.filter((e) => e.type === 'run/end');
    expect(ends.map((e) => e.payload.status)).toEqual(['succeeded']);
    const answer = (ends[0]!.payload.result as { finalMessage: string }).finalMessage;
    const result = (await logOf(inner, 's')).filter((e) => e.type === 'tool/result');
    expect(result).toHaveLength(1);
    expect(result[0]!.payload.outcome).toMatchObject({ kind: 'completed', content: answer, isError: false });
    // the child opened again settled its run from its log: started once, never again
    expect(child.filter((e) => e.type === 'session/attached')).toHaveLength(2);
    expect(child.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt']);
  });

  it("a parent cancelled while its call reads the child's log: the child's run never starts and the call is cancelled", async () => {
    const gate = deferred();
    const reached = deferred();
    const store = gatedReads(memoryStore(), gate.promise, reached.resolve);
    const runtime = tree(store, ['never asked']);
    const s = await runtime.openSession('s');
    const run = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await reached.promise;
    await s.requestCancel();
    gate.resolve();
    expect((await run).status).toBe('cancelled');
    expect((await logOf(store, CHILD)).filter((e) => e.type === 'run/start')).toEqual([]);
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result');
    expect(result?.payload.outcome).toMatchObject({ kind: 'cancelled' });
  });

  it('a parent cancelled while its child does not stop within the grace time: the call is cancelled, never uncertain', async () => {
    const started = deferred();
    // a child tool that ignores its signal for a while: the child's cancel outlasts the parent's grace
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => {
        started.resolve();
        await new Promise((r) => setTimeout(r, 300));
        return 'slow done';
      },
    });
    // and the child's closing commit takes longer than the parent's grace: the child settles after it
    const base = memoryStore();
    const store = storeWithAppend(base, async (id, epoch, seq, drafts) => {
      if (id === CHILD && drafts.some((d) => d.type === 'run/end')) await new Promise((r) => setTimeout(r, 200));
      return base.append(id, epoch, seq, drafts);
    });
    const runtime = tree(store, [{ toolCalls: [{ id: 'k1', name: 'slow', arguments: {} }] }, 'never'], {
      tools: [slow],
      cancelGraceMs: 20,
    });
    const s = await runtime.openSession('s');
    const run = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    await s.requestCancel();
    const r = await run;
    expect(r).toMatchObject({ status: 'cancelled', uncertainCalls: [] });
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result');
    expect(result?.payload.outcome).toMatchObject({ kind: 'cancelled', settled: false });
  });

  it('a parent writer another process took over neither opens nor runs the child; the new writer starts it once', async () => {
    const inner = memoryStore();
    const gate = deferred();
    const reached = deferred();
    // the first runtime's process pauses as its call reads the child's log (after it opened it)
    const first = tree(gatedReads(inner, gate.promise, reached.resolve), ['from the fenced writer']);
    void (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' }).catch(() => undefined);
    await reached.promise;
    // another process takes the parent over, and resumes the call
    const second = tree(inner, ['from the new writer']);
    const s2 = await second.openSession('s', { takeover: true, resume: 'manual' });
    const epochOfSecond = (await inner.getHead('s'))!.writerEpoch;
    gate.resolve(); // the first process goes on: its writer no longer holds the parent
    await new Promise((r) => setTimeout(r, 50));
    expect((await logOf(inner, CHILD)).filter((e) => e.type === 'run/start')).toEqual([]);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Done.', uncertainCalls: [] });
    const child = await logOf(inner, CHILD);
    expect(child.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt']);
    expect(child.find((e) => e.type === 'final/message')?.payload.content).toBe('from the new writer');
    expect(epochOfSecond).toBe(2);
  });
  it("a child left running by a parent writer another process took over commits nothing more: the child's writer is guarded by its parent's", async () => {
    const inner = memoryStore();
    const asked = deferred();
    const answer = deferred();
    let ran = 0;
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: () => (ran++, 'ran') });
    // the child's model is asked, and answers (a call of `slow`) only once the parent has been taken over
    const childModel: ModelProvider = {
      modelId: 'researcher-model',
      call: async () => {
        asked.resolve();
        await answer.promise;
        return {
          message: { role: 'assistant', content: '', toolCalls: [{ id: 'k1', name: 'slow', arguments: '{}' }] },
          finishReason: 'tool_calls',
        };
      },
    };
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel, tools: [slow] });
    const first = createRuntime({ store: inner, model: scriptedModel([ask, 'Done.']), tools: [agentTool(researcher)] });
    cleanups.push(() => first.close().catch(() => undefined));
    void (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' }).catch(() => undefined);
    await asked.promise;
    const before = (await logOf(inner, CHILD)).length;
    const second = tree(inner, ['unused']);
    await second.openSession('s', { takeover: true, resume: 'manual' }); // fences the first process's parent writer
    answer.resolve();
    await new Promise((r) => setTimeout(r, 100));
    expect((await logOf(inner, CHILD)).slice(before).map((e) => e.type)).toEqual([]);
    expect(ran).toBe(0);
  });
});
