import { BehaviorSubject } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isLogDivergedError,
  isValidationError,
  memoryStore,
  scriptedModel,
  type EventStore,
} from '../../src/index.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import { deferred } from '../helpers/drafts.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { ids, lmdbRuntime, logOf, sleep, typesOf } from '../helpers/runtime.js';

// submitInput (steer) and cancelInput: accepted inputs are durable, idempotent by inputId, and
// join the conversation between tool batches.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('steer inputs', () => {
  it('a steer input lands between batches: after the running batch settles, before the next model call, skipping nothing', async () => {
    const gate = deferred();
    const ran: string[] = [];
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({ n: z.string() }),
      execute: async ({ n }) => {
        ran.push(n);
        if (n === 'a') await gate.promise;
        return n;
      },
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'slow', arguments: { n: 'a' } },
          { name: 'slow', arguments: { n: 'b' } },
        ],
      },
      'ok',
    ]);
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
    expect(model.requests[2]!.messages.at(-1)).toMatchObject({ role: 'user', content: 'use metric units' });
    expect((await logOf(store, 's')).some((e) => e.type === 'user/message' && e.payload.inputId === 'st')).toBe(true);
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

  it('a steer accepted before a restart and taken by no run starts a run of its own when the session is opened again', async () => {
    const db = lmdbPath();
    // the kill switch keeps the steer's run from starting in the first process (as a crash right
    // after input/accepted would)
    const rt1 = db.rt({ model: scriptedModel([]), killSwitch: new BehaviorSubject(true) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'later', message: 'remember me', mode: 'steer' });
    await rt1.close();
    const model = scriptedModel(['ok']);
    const rt2 = db.rt({ model });
    const s2 = await rt2.openSession('s');
    await s2.waitForIdle();
    expect(model.requests[0]!.messages.map((m) => m.content)).toEqual(['remember me']);
    expect((await rt2.store.getHead('s'))!.pendingInputs).toEqual([]);
    const log = await logOf(rt2.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'later')?.payload.status).toBe('succeeded');
  });

  it('a steer on an idle session starts a run of its own at once (runId = inputId), waiting for no later input', async () => {
    const model = scriptedModel(['first', 'steered']);
    const { runtime, store } = lmdbRuntime({ model });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    // (its run starts before the receipt is returned: the receipt says consumed)
    expect((await s.submitInput({ inputId: 'st', message: 'and in metric units', mode: 'steer' })).durability).toBe('durable');
    await s.waitForIdle();
    expect(model.requests).toHaveLength(2);
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'user', content: 'and in metric units' });
    const log = await logOf(store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'st')?.payload.status).toBe('succeeded');
    expect((await store.getHead('s'))!.pendingInputs).toEqual([]);
  });

  it("a steer accepted during the run's last model call starts a run of its own once that run settles", async () => {
    const gate = deferred();
    const calls: string[] = [];
    const model = {
      modelId: 'gated',
      async call(req: ModelRequest) {
        const last = req.messages.at(-1)!;
        calls.push(String(last.content));
        if (calls.length === 1) await gate.promise; // the run's only (and so last) model call
        return { message: { role: 'assistant' as const, content: `answer to ${String(last.content)}` }, finishReason: 'stop' as const };
      },
    };
    const { runtime, store } = lmdbRuntime({ model: model as never });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    while (calls.length === 0) await sleep(2);
    expect((await s.submitInput({ inputId: 'late', message: 'one more thing', mode: 'steer' })).status).toBe('accepted');
    gate.resolve();
    expect((await running).status).toBe('succeeded');
    // nothing else is submitted: the session reaches rest by itself with the steer consumed
    expect(await Promise.race([s.waitForIdle().then(() => 'idle'), sleep(5000).then(() => 'still waiting')])).toBe('idle');
    expect(calls).toEqual(['go', 'one more thing']);
    const log = await logOf(store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'late')?.payload.status).toBe('succeeded');
    expect((await store.getHead('s'))!.pendingInputs).toEqual([]);
    expect((await s.submitInput({ inputId: 'late', message: 'one more thing', mode: 'steer' })).status).toBe('consumed');
  });

  it('a steer whose inputId names an existing run is refused (it may run as runId = inputId)', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['a']) });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await expect(s.submitInput({ inputId: 'r1', message: 'again', mode: 'steer' })).rejects.toSatisfy(isValidationError);
  });
});

describe('cancelInput', () => {
  it('cancelInput withdraws an input not yet consumed', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'done'),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'ok']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await started.promise;
    await s.submitInput({ inputId: 'st', message: 'never mind', mode: 'steer' });
    expect((await s.cancelInput('st')).status).toBe('cancelled');
    gate.resolve();
    await running;
    await s.waitForIdle();
    const log = await logOf(store, 's');
    expect(typesOf(log)).toContain('input/cancelled');
    expect(log.some((e) => e.type === 'user/message' && e.payload.inputId === 'st')).toBe(false);
    expect(log.some((e) => e.type === 'run/start' && e.payload.runId === 'st')).toBe(false);
  });

  it('cancelInput of a steer whose submitInput is still being written withdraws it: it never reaches the model', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'done'),
    });
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
    expect(cancelled).toMatchObject({ inputId: 'st', status: 'cancelled' });
    expect(model.requests[1]!.messages.map((m) => m.content)).not.toContain('oops, ignore this');
    expect((await logOf(store, 's')).some((e) => e.type === 'input/cancelled' && e.payload.inputId === 'st')).toBe(true);
  });

  it('a cancelled input submitted again from a new process gets its cancelled receipt and is not consumed', async () => {
    const db = lmdbPath();
    // the kill switch keeps the steer from starting its run before it is cancelled
    const rt1 = db.rt({ model: scriptedModel([]), killSwitch: new BehaviorSubject(true) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' });
    expect((await s1.cancelInput('in')).status).toBe('cancelled');
    expect((await s1.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' })).status).toBe('cancelled');
    await rt1.close();
    const rt2 = db.rt({ model: scriptedModel([]) });
    const s2 = await rt2.openSession('s');
    expect(await s2.submitInput({ inputId: 'in', message: 'never mind', mode: 'steer' })).toEqual({
      inputId: 'in',
      status: 'cancelled',
      durability: 'durable',
    });
  });

  it('cancelInput of an input consumed in an earlier process returns its consumed receipt', async () => {
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

  it('an input cancelled in a log written before input-cancelled ids is reported cancelled after a reopen', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([]) });
    const { writerEpoch, lastSeq } = await store.attachWriter('s');
    await store.append('s', writerEpoch, lastSeq + 1, [
      {
        eventId: 'input:I',
        type: 'input/accepted',
        turn: 0,
        step: 0,
        attempt: 0,
        surfaceOp: 'none',
        payload: { inputId: 'I', mode: 'follow_up', messages: [{ role: 'user', content: 'later' }] },
      },
      // the previous version wrote input/cancelled with a generated id
      { type: 'input/cancelled', turn: 0, step: 0, attempt: 0, surfaceOp: 'none', payload: { inputId: 'I' } },
    ]);
    const s = await runtime.openSession('s');
    expect((await s.submitInput({ inputId: 'I', mode: 'follow_up', message: 'later' })).status).toBe('cancelled');
  });
});

describe('an input whose acceptance is in doubt', () => {
  it('an input found in the log after its accept failed in doubt stops the writer (LogDivergedError), not a "consumed" receipt; a reopen runs it', async () => {
    const inner = memoryStore();
    let lose = false; // the next input/accepted lands, then its answer is lost
    let unreadable = false; // the server is gone for reads too
    const readable = () => {
      if (unreadable) throw new Error('connection terminated (injected)');
    };
    const store: EventStore = {
      ...inner,
      attachWriter: (id) => inner.attachWriter(id),
      append: async (id, epoch, seq, drafts) => {
        const records = await inner.append(id, epoch, seq, drafts);
        if (lose && drafts.some((d) => d.type === 'input/accepted')) {
          lose = false;
          unreadable = true;
          throw new Error('connection terminated after COMMIT (injected)');
        }
        return records;
      },
      readEvents: (id, r) => (readable(), inner.readEvents(id, r)),
      getHead: async (id) => (readable(), inner.getHead(id)),
      getEventById: async (id, e) => (readable(), inner.getEventById(id, e)),
      loadSurface: (id) => inner.loadSurface(id),
      listSessions: () => inner.listSessions(),
      events$: (id, o) => inner.events$(id, o),
      close: () => inner.close(),
    };
    const runtime = createRuntime({ store, model: scriptedModel(['answered']) });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    lose = true;
    await expect(s.submitInput({ inputId: 'in-1', message: 'go', mode: 'follow_up' })).rejects.toThrow(/injected/);
    unreadable = false;
    // asked again (a worker's drain retried): the log has it, the session does not
    const again = await s.submitInput({ inputId: 'in-1', message: 'go', mode: 'follow_up' }).catch((e: unknown) => e);
    expect(isLogDivergedError(again), String(again)).toBe(true);
    await s.close();
    // reopened, the session knows it from its log: the input starts its run (runId = inputId)
    await runtime.openSession('s');
    const result = await runtime.waitForResult('s', 'in-1', { signal: AbortSignal.timeout(5000), pollMs: 20 });
    expect(result, JSON.stringify(result)).toMatchObject({ status: 'succeeded', finalMessage: 'answered' });
  });
});
