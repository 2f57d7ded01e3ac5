import { describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from '../../src/index.js';

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Advances a SimulatedClock in steps, letting the runtime react between them, until `done()`. */
async function advanceUntil(clock: SimulatedClock, ms: number, done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) {
    clock.increment(ms);
    await settle();
  }
}

describe("the runtime's clock", () => {
  it('times a tool out on the injected clock: nothing fires until that clock moves', async () => {
    const clock = new SimulatedClock();
    clock.set(Date.now());
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      timeoutMs: 5_000,
      execute: (_, { signal }) =>
        new Promise<string>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true })),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      clock,
      model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'gave up']),
      tools: [slow],
    });
    const s = await runtime.openSession('s');
    let done = false;
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' }).finally(() => (done = true));
    await new Promise((r) => setTimeout(r, 50)); // real time passes: the simulated clock has not moved
    expect(done).toBe(false);
    await advanceUntil(clock, 1_000, () => done);
    const r = await running;
    expect(r.status).toBe('succeeded');
    const ends = s.snapshot().messages.filter((m) => m.role === 'tool');
    expect(ends[0]?.content).toContain('timed out after 5000 ms');
    await runtime.close();
  });

  it('spends maxDurationMs by the injected clock', async () => {
    const clock = new SimulatedClock();
    clock.set(Date.now());
    let release: () => void = () => {};
    const wait = defineTool({
      name: 'wait',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => new Promise<string>((resolve) => (release = () => resolve('ok'))),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      clock,
      model: scriptedModel([{ toolCalls: [{ name: 'wait', arguments: {} }] }], { loop: true }),
      tools: [wait],
      budget: { maxDurationMs: 60_000 },
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await new Promise((r) => setTimeout(r, 20));
    clock.increment(61_000);
    await settle();
    release();
    const r = await running;
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
    await runtime.close();
  });

  it("times a subscriber's delivery out on the injected clock: a hung required listener holds the run until that clock moves", async () => {
    const clock = new SimulatedClock();
    clock.set(Date.now());
    const runtime = createRuntime({ store: memoryStore(), clock, model: scriptedModel(['hi']) });
    const s = await runtime.openSession('s');
    const got: string[] = [];
    s.subscribe(
      (e) => {
        got.push(e.event.type);
        if (got.length === 1) return new Promise<void>(() => {}); // never answers
      },
      { required: true, name: 'audit', capacity: 1, deliveryTimeoutMs: 60_000 },
    );
    let done = false;
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' }).finally(() => (done = true));
    await new Promise((r) => setTimeout(r, 50)); // real time passes: the simulated clock has not moved
    expect(done).toBe(false);
    expect(got).toEqual(['run_start']);
    clock.increment(60_000);
    await Promise.race([running, new Promise((r) => setTimeout(r, 5_000))]); // not the 60 s of real time
    expect(done).toBe(true);
    const r = await running;
    expect(r.status).toBe('succeeded');
    expect(r.deliveryErrors).toEqual([expect.objectContaining({ consumer: 'audit', reason: 'timeout', seq: 1 })]);
    await runtime.close();
  });

  it('stamps approval deadlines with the injected clock', async () => {
    const clock = new SimulatedClock();
    clock.set(1_000_000);
    const pay = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const runtime = createRuntime({
      store: memoryStore(),
      clock,
      model: scriptedModel([{ toolCalls: [{ id: 'p', name: 'pay', arguments: {} }] }, 'ok']),
      tools: [pay],
      config: { approvalTimeoutMs: 10_000 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    expect(r.pendingRequest).toMatchObject({ kind: 'approval', expiresAt: 1_010_000 });
    clock.increment(20_000); // past the deadline: the answer counts as denied
    const late = await s.execute({
      kind: 'respond',
      runId: 'r1',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p: 'approve' } },
    });
    expect(late.status).toBe('succeeded');
    const tool = s.snapshot().messages.find((m) => m.role === 'tool');
    expect(tool?.content).toContain('expired');
    await runtime.close();
  });
});
