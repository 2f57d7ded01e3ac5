import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel, type ScriptedStep } from '../../src/index.js';
import { addDecimal, decimalAtLeast } from '../../src/contracts/budget.js';
import { ids, logOf, memRuntime } from '../helpers/runtime.js';
import { tokenPrice } from '../crash/budget-pricing.js';

// Reservations (docs/guarantees.md, "Budgets"): before each model call the run reserves its worst
// case (input estimate + output cap, priced); no call starts whose worst case could cross a budget.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });
const looping = (usage: { inputTokens: number; outputTokens: number }) =>
  scriptedModel([{ toolCalls: [{ name: 'echo', arguments: {} }], usage }], { loop: true });

async function run(model: ReturnType<typeof scriptedModel>, budget: Record<string, unknown>, config: Record<string, unknown> = {}) {
  const { runtime, store } = memRuntime({ model, tools: [echo], pricing: tokenPrice, budget, config: { outputReserve: 100, ...config } });
  cleanups.push(() => runtime.close());
  const s = await runtime.openSession('s');
  const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
  return { r, log: await logOf(store, 's') };
}

describe('budget reservations', () => {
  it('no model call starts whose worst case could cross maxCost: the run ends budget_exhausted naming it, its cost within the budget', async () => {
    // a provider that keeps to the output cap it is sent (up to 50 tokens a call)
    const model = scriptedModel(
      [
        (req) => ({
          toolCalls: [{ name: 'echo', arguments: {} }],
          usage: { inputTokens: 10, outputTokens: Math.min(50, req.maxOutputTokens ?? 50) },
        }),
      ],
      { loop: true },
    );
    const { r, log } = await run(model, { maxCost: '0.3', maxSteps: 50 });
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost' });
    // every call's worst case (its input estimate and the output cap it was sent with) fit what was left
    let spent = '0';
    const messages = log.filter((e) => e.type === 'assistant/message');
    expect(messages.length).toBe(model.requests.length);
    for (const [i, e] of messages.entries()) {
      const p = e.payload as {
        usage: { inputTokens: number; outputTokens: number };
        reserved: { inputTokens: number; outputTokens: number };
      };
      expect(model.requests[i]!.maxOutputTokens).toBe(p.reserved.outputTokens);
      expect(decimalAtLeast('0.3', addDecimal(spent, tokenPrice(p.reserved)))).toBe(true);
      spent = addDecimal(spent, tokenPrice(p.usage));
    }
    expect(r.cost).toBe(spent);
    expect(decimalAtLeast('0.3', spent)).toBe(true);
    expect(r.spending).toEqual({ maxCost: { limit: '0.3', spent, reserved: '0', remaining: r.spending!.maxCost!.remaining } });
    expect(addDecimal(spent, r.spending!.maxCost!.remaining)).toBe('0.3');
  });

  it("the output cap is the largest the cost budget leaves, so a provider's max_tokens never allows more than the budget", async () => {
    // 0.0001 an input token, 0.001 an output token; maxCost 0.05: the first call may output at most ~(500 − input) / 10 tokens
    const model = scriptedModel([{ text: 'hi', usage: { inputTokens: 1, outputTokens: 1 } }]);
    const { r, log } = await run(model, { maxCost: '0.05' }, { outputReserve: 4000 });
    expect(r.status).toBe('succeeded');
    const { reserved } = log.find((e) => e.type === 'assistant/message')!.payload as {
      reserved: { inputTokens: number; outputTokens: number };
    };
    expect(model.requests[0]!.maxOutputTokens).toBe(Math.floor((500 - reserved.inputTokens) / 10));
    expect(decimalAtLeast('0.05', tokenPrice(reserved))).toBe(true);
    expect(decimalAtLeast('0.05', tokenPrice({ ...reserved, outputTokens: reserved.outputTokens + 1 }))).toBe(false);
  });

  it('a maxOutputTokens budget caps each call at what it leaves and starts none once nothing is left', async () => {
    const model = looping({ inputTokens: 1, outputTokens: 40 });
    const { r } = await run(model, { maxOutputTokens: 100 });
    expect(model.requests.map((q) => q.maxOutputTokens)).toEqual([100, 60, 20]);
    // the third call reported 40 tokens above its cap of 20: recorded, and named on the result
    expect(r).toMatchObject({
      status: 'budget_exhausted',
      budget: 'maxOutputTokens',
      usage: { outputTokens: 120 },
      spending: {
        maxOutputTokens: { limit: '100', spent: '120', reserved: '0', remaining: '0' },
        overruns: [{ step: 3, outputTokens: { cap: 20, reported: 40 } }],
      },
    });
  });

  it('a failed attempt counts at its reservation (a retry included); a rate-limit refusal before any output counts nothing', async () => {
    const steps: ScriptedStep[] = [
      { error: { message: 'reset mid-stream', retryable: true, code: 'server', partialOutput: true } },
      { error: { message: 'slow down', retryable: true, code: 'rate_limit' } },
      { text: 'done', usage: { inputTokens: 10, outputTokens: 5 } },
    ];
    const { r, log } = await run(scriptedModel(steps), { maxCost: '1' }, { retryBackoffMs: 1 });
    const attempts = log
      .filter((e) => e.type === 'assistant/attempt')
      .map((e) => e.payload as { counted: string; reserved: { cost: string } });
    expect(attempts.map((a) => a.counted)).toEqual(['reservation', 'nothing']);
    expect(r).toMatchObject({
      status: 'succeeded',
      cost: addDecimal('0', tokenPrice({ inputTokens: 10, outputTokens: 5 })),
      spending: { maxCost: { reserved: attempts[0]!.reserved.cost } },
    });
  });

  it("a token budget's reservation is priced when there is pricing: a call counted at it costs its price, live and in a recovery's fold alike", async () => {
    const steps: ScriptedStep[] = [
      { error: { message: 'reset mid-stream', retryable: true, code: 'server', partialOutput: true } },
      { text: 'done', usage: { inputTokens: 10, outputTokens: 5 } },
    ];
    const { r, log } = await run(scriptedModel(steps), { maxOutputTokens: 1000 }, { retryBackoffMs: 1 });
    expect(r.status).toBe('succeeded');
    const [attempt] = log
      .filter((e) => e.type === 'assistant/attempt')
      .map((e) => e.payload as { counted: string; reserved: { inputTokens: number; outputTokens: number; cost?: string } });
    expect(attempt!.counted).toBe('reservation');
    const { inputTokens, outputTokens } = attempt!.reserved;
    expect(attempt!.reserved.cost).toBe(tokenPrice({ inputTokens, outputTokens }));
  });

  it('a retry the budget cannot hold after a failed attempt counted is not made: the run ends budget_exhausted', async () => {
    const model = scriptedModel([{ error: { message: 'reset', retryable: true, code: 'server', partialOutput: true } }, 'never sent']);
    // the first attempt reserves as much of 0.1005 as its cap allows (≤ 100 output tokens) and counts it
    // as it fails: what is left cannot hold even a one-token call
    const { r } = await run(model, { maxCost: '0.1005' }, { retryBackoffMs: 1 });
    expect(model.requests.length).toBe(1);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost' });
  });

  it('usage a provider reports above the estimate is recorded and the overrun named on the result', async () => {
    const model = scriptedModel([{ text: 'hi', usage: { inputTokens: 90_000, outputTokens: 1 } }]);
    const { r, log } = await run(model, { maxCost: '100' });
    const msg = log.find((e) => e.type === 'assistant/message')!.payload as { overrun?: unknown; reserved: { inputTokens: number } };
    const overrun = { step: 1, inputTokens: { estimated: msg.reserved.inputTokens, reported: 90_000 } };
    expect(msg.overrun).toMatchObject(overrun);
    expect(r.spending?.overruns).toEqual([expect.objectContaining(overrun)]);
  });

  it("a cancel during a retry's backoff keeps the step's failed attempts counted at their reservations in the cancelled run's result", async () => {
    const model = scriptedModel([
      { error: { message: 'dropped after output', retryable: true, code: 'server', partialOutput: true } },
      'never',
    ]);
    // a backoff long enough that the cancel lands in it
    const { runtime, store } = memRuntime({
      model,
      pricing: tokenPrice,
      budget: { maxCost: '1' },
      config: { outputReserve: 100, retryBackoffMs: 60_000, maxRetryDelayMs: 60_000 },
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    while (model.requests.length < 1) await new Promise((r) => setTimeout(r, 1));
    await new Promise((r) => setTimeout(r, 20));
    await s.requestCancel();
    const r = await running;
    expect(r.status).toBe('cancelled');
    expect(model.requests).toHaveLength(1);
    const attempt = (await logOf(store, 's')).find((e) => e.type === 'assistant/attempt')!.payload as {
      counted: string;
      reserved: { cost: string; outputTokens: number };
    };
    expect(attempt.counted).toBe('reservation');
    expect(r.counted).toEqual({ outputTokens: attempt.reserved.outputTokens, cost: attempt.reserved.cost });
    expect(r.spending?.maxCost).toMatchObject({ spent: '0', reserved: attempt.reserved.cost });
  });
});
