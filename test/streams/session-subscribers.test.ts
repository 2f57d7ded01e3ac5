import { describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { ids, lmdbRuntime, sleep } from '../helpers/runtime.js';

// Subscribers of a session (session.subscribe): required ones hold the run, and close delivers
// what was published before it.

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});

describe('subscribers on a session', () => {
  it.each(['required', 'plain', 'events$'] as const)(
    'a run started from an execution_finished handler (%s) starts once the session rests, never ExecutionBusy',
    async (mode) => {
      const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['hi'], { loop: true }) });
      const s = await runtime.openSession('s');
      let next: Promise<unknown> | undefined;
      const onEnv = (e: { event: { type: string } }) => {
        if (e.event.type === 'execution_finished' && !next) next = s.run('next').result.catch((err: unknown) => err);
      };
      if (mode === 'events$') s.events$.subscribe(onEnv);
      else s.subscribe(onEnv, { name: mode, required: mode === 'required' });
      expect((await s.run('first').result).status).toBe('succeeded');
      for (let i = 0; i < 100 && !next; i++) await sleep(5);
      expect(await next).toMatchObject({ status: 'succeeded', finalMessage: 'hi' });
      await runtime.close();
    },
  );

  it('a required subscriber makes the run wait; a failing non-required one is listed in deliveryErrors', async () => {
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
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
    s.subscribe(
      () => {
        throw new Error('listener bug');
      },
      { name: 'buggy' },
    );
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

  it("a delivery that fails after its attempt's result was made is listed in the session's next result, naming its attempt", async () => {
    // the runtime's clock times deliveries: simulated, the first attempt ends before the timeout, however slow the machine
    const clock = new SimulatedClock();
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel(['one', 'two']), clock });
    const s = await rt.openSession('s');
    const slow = deferred(); // (never resolved: the listener outlasts its timeout)
    s.subscribe(() => slow.promise, { name: 'slow', deliveryTimeoutMs: 50 });
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    expect(first.deliveryErrors).toEqual([]);
    clock.increment(100);
    const second = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'again' });
    expect(second.deliveryErrors).toEqual([expect.objectContaining({ consumer: 'slow', reason: 'timeout', runId: 'r1', attemptId: 'a1' })]);
    await rt.close();
  });

  it('a synchronous listener with capacity 1 gets a whole tool step without a delivery error', async () => {
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type), { name: 'fast', capacity: 1 });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    expect(r.deliveryErrors).toEqual([]);
    expect(seen).toContain('tool_end');
    expect(seen.at(-1)).toBe('execution_finished');
    await rt.close();
  });
});

describe('session.close with subscribers', () => {
  it('a required listener that awaits session.close inside its delivery does not stall the close', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    let closed = false;
    s.subscribe(
      async (e) => {
        if (e.event.type !== 'execution_finished') return;
        await s.close();
        closed = true;
      },
      { name: 'closer', required: true, deliveryTimeoutMs: 60_000 },
    );
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(50);
    expect(closed).toBe(true);
    await rt.close();
  });

  it('session.close after execute still delivers the queued envelopes, execution_finished included', async () => {
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    const all: string[] = [];
    s.events$.subscribe((e) => all.push(e.event.type));
    s.subscribe(
      async (e) => {
        seen.push(e.event.type);
        await sleep(2);
      },
      { name: 'audit', required: true, capacity: 4 },
    );
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    await rt.close();
    expect(seen).toEqual(all);
    expect(seen.at(-1)).toBe('execution_finished');
  });
});
