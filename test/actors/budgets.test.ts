import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, memRuntime, sleep } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// Budgets (maxSteps, maxToolCalls, maxOutputTokens, maxCost, maxDurationMs): a run that spends
// one ends budget_exhausted, naming it; cost arithmetic is exact decimal.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});
const loopModel = () =>
  scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'again' } }], usage: { inputTokens: 100, outputTokens: 50 } }], {
    loop: true,
  });

describe('budgets (real LMDB)', () => {
  it.each([
    ['maxSteps', { maxSteps: 3 }, 3],
    ['maxToolCalls', { maxToolCalls: 2 }, 2],
    ['maxOutputTokens', { maxOutputTokens: 120 }, 3],
    ['maxCost', { maxCost: '0.25' }, 3],
  ] as const)('budget %s ends the run budget_exhausted, naming it', async (name, budget, steps) => {
    const { runtime, store } = lmdbRuntime({ model: loopModel(), tools: [echo], budget, pricing: () => '0.1' });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'budget_exhausted', budget: name, steps });
    const end = (await logOf(store, 's')).at(-1)!;
    expect(end).toMatchObject({ type: 'run/end', payload: { status: 'budget_exhausted', result: { budget: name } } });
  });

  it('budget maxDurationMs ends the run budget_exhausted, naming it', async () => {
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (await sleep(30), 'ok') });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }], { loop: true }),
      tools: [slow],
      budget: { maxDurationMs: 50 },
    });
    const s = await runtime.openSession('s');
    expect(await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).toMatchObject({
      status: 'budget_exhausted',
      budget: 'maxDurationMs',
    });
  });

  it('a model call under way when maxDurationMs runs out is cut: the run ends budget_exhausted naming it, the call counted at its reservation', async () => {
    const { runtime, store } = memRuntime({
      model: scriptedModel([{ text: 'a slow answer', delayMs: 60_000 }]),
      budget: { maxDurationMs: 100, maxOutputTokens: 1000 },
      config: { outputReserve: 300 },
    });
    const s = await runtime.openSession('s');
    const t0 = Date.now();
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(r).toMatchObject({
      status: 'budget_exhausted',
      budget: 'maxDurationMs',
      spending: { maxOutputTokens: { spent: '0', reserved: '300' } },
    });
    const attempt = (await logOf(store, 's')).find((e) => e.type === 'assistant/attempt')!.payload;
    expect(attempt).toMatchObject({ counted: 'reservation', error: { code: 'deadline', retryable: false } });
  });

  it('no retry is sent once maxDurationMs has run out during its backoff: the run ends budget_exhausted, the failed attempt counted once', async () => {
    const model = scriptedModel([{ error: { message: 'reset', retryable: true, code: 'server', partialOutput: true } }, 'never sent']);
    const { runtime } = memRuntime({
      model,
      budget: { maxDurationMs: 100, maxOutputTokens: 1000 },
      config: { outputReserve: 300, retryBackoffMs: 300 },
    });
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(model.requests).toHaveLength(1);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs', spending: { maxOutputTokens: { reserved: '300' } } });
  });

  it('no retry is sent after a backoff that reached maxDurationMs, even when its timer fires before the clock reads the deadline', async () => {
    // a timer that fires 5 ms early (Node's timers and Date.now round differently: seen as a flake)
    const early = {
      now: () => Date.now(),
      setTimeout: (fn: () => void, ms: number) => setTimeout(fn, Math.max(0, ms - 5)),
      clearTimeout: (t: unknown) => clearTimeout(t as NodeJS.Timeout),
    };
    const model = scriptedModel([{ error: { message: 'reset', retryable: true, code: 'server', partialOutput: true } }, 'never sent']);
    const { runtime } = memRuntime({
      model,
      budget: { maxDurationMs: 100, maxOutputTokens: 1000 },
      config: { outputReserve: 300, retryBackoffMs: 300 },
      clock: early,
    });
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(model.requests).toHaveLength(1);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
  });

  it('maxDurationMs is spent when its timer fires, even when the timer fires before the clock reads the deadline', async () => {
    // Node's timers and Date.now round differently: a timer can fire a millisecond early
    const early = {
      now: () => Date.now(),
      setTimeout: (fn: () => void, ms: number) => setTimeout(fn, Math.max(0, ms - 5)),
      clearTimeout: (t: unknown) => clearTimeout(t as NodeJS.Timeout),
    };
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (await sleep(30), 'ok') });
    const { runtime } = memRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }], { loop: true }),
      tools: [slow],
      budget: { maxDurationMs: 50 },
      clock: early,
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
    // two 30 ms steps cross the 50 ms: spent at the check after the second (after the first on a
    // busy machine) — never a third step because the early timer's firing went uncounted
    expect(r.steps).toBeLessThanOrEqual(2);
  });

  // Guards against (seen in scenarios-runs.test.ts, SCENARIO_SEED=30066 SCENARIO_COUNT=1): a detach landing in the step that
  // spends maxToolCalls ends the attempt `detached` instead of `budget_exhausted`, and the
  // `continue` then calls the model and runs more tools with the budget already spent.
  it('a run that spent maxToolCalls settles budget_exhausted even when a detach came in the same step, and no continue calls the model again', async () => {
    const dir = tempDir();
    let started!: () => void;
    const startedP = new Promise<void>((res) => (started = res));
    const releases: (() => void)[] = [];
    const look = defineTool({
      name: 'look',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (started(), new Promise<string>((r) => releases.push(() => r('seen')))),
    });
    const tools = [look];
    const model = scriptedModel([
      { toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] },
      { toolCalls: [{ id: 'c2', name: 'look', arguments: {} }] },
      'done',
    ]);
    const rt = createRuntime({ store: lmdbStore({ path: dir.path }), model, tools, budget: { maxToolCalls: 1 } });
    const s = await rt.openSession('s');
    const first = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'look' });
    await startedP;
    s.requestDetach(); // lands in the step that spends the budget
    releases[0]!();
    // the spent budget settles the run before the detach could leave it resumable
    const res = await first;
    await expect(s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).rejects.toThrow(/not open/);
    for (const r of releases) r();
    const log = await logOf(rt.store, 's');
    const calls = log.filter((e) => e.type === 'tool/call').map((e) => e.payload.callId);
    await rt.close();
    await dir.cleanup();
    // the run already made 1 of 1 allowed tool calls: the continue must end budget_exhausted
    expect({ modelCalls: model.requests.length, calls, status: res.status, budget: res.budget }).toEqual({
      modelCalls: 1,
      calls: ['c1'],
      status: 'budget_exhausted',
      budget: 'maxToolCalls',
    });
  });
});

describe('maxCost and pricing', () => {
  // DESIGN §4 item 8 / §6: `maxCost` is a decimal string and `pricing` returns decimal strings, and the
  // run's result reports `cost`. parseDecimal silently truncates past 18 places, so long prices are
  // summed wrongly and a run that spent exactly its maxCost runs on (here to maxSteps), reporting a
  // cost it did not spend. (Float arithmetic would not even get the second case wrong.)
  it.each([
    { prices: ['0.1234567890123456789', '0.1234567890123456789'], maxCost: '0.2469135780246913578', cost: '0.2469135780246913578' },
    { prices: ['0.0000000000000000005', '0.0000000000000000005'], maxCost: '0.000000000000000001', cost: '0.000000000000000001' },
  ])('maxCost is exact for decimals longer than 18 places: $prices vs $maxCost', async ({ prices, maxCost, cost }) => {
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });
    // one price a call (pricing is also asked for each call's worst case before it starts)
    const { runtime } = memRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: {} }], usage: { inputTokens: 1, outputTokens: 1 } }], { loop: true }),
      tools: [echo],
      pricing: () => prices[0]!,
      budget: { maxCost, maxSteps: 8 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost', steps: 2, cost });
  });

  it('a pricing function returning something other than a decimal string fails the run as a result, with run/end written', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ text: 'hi', usage: { inputTokens: 1, outputTokens: 1 } }]),
      pricing: () => '1e-7',
      budget: { maxCost: '1' },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'failed', outcome: 'failed', error: { kind: 'execution' } });
    expect(r.error!.message).toMatch(/pricing returned "1e-7"/);
    const log = await logOf(store, 's');
    expect(log.at(-1)).toMatchObject({ type: 'run/end', payload: { status: 'failed' } });
  });
});
