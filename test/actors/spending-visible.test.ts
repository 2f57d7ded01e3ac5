import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel, type ModelProvider, type SessionSnapshot } from '../../src/index.js';
import { formatLine } from '../../src/cli/format.js';
import { buildTimeline } from '../../src/cli/timeline-model.js';
import { addDecimal, subDecimal } from '../../src/contracts/budget.js';
import { collect } from '../helpers/drafts.js';
import { memoryTracing } from '../runtime/tracing/otel.js';
import { tokenPrice } from '../crash/budget-pricing.js';

// Visible spending (docs/guarantees.md, "Budgets"): result.spending, the session snapshot, the
// CLI's log and view, and each model call's span show what the run spent, reserved and has left.

const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });
const usage = { inputTokens: 10, outputTokens: 5 };

describe('visible spending', () => {
  it('the session snapshot shows spent, reserved (the call in flight) and remaining per budget while a model call is under way', async () => {
    let seen: SessionSnapshot | undefined;
    let session: Awaited<ReturnType<ReturnType<typeof createRuntime>['openSession']>> | undefined;
    const inner = scriptedModel([
      { toolCalls: [{ name: 'echo', arguments: {} }], usage },
      { text: 'done', usage },
    ]);
    const model: ModelProvider = {
      modelId: 'm',
      call: (req, on) => {
        if (inner.requests.length === 1) seen = session!.snapshot(); // during the second call
        return inner.call(req, on);
      },
    };
    const runtime = createRuntime({ store: memoryStore(), model, tools: [echo], pricing: tokenPrice, budget: { maxCost: '1' } });
    session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    const log = await collect(runtime.store.readEvents('s'));
    await runtime.close();
    const [first, second] = log.filter((e) => e.type === 'assistant/message').map((e) => e.payload as { reserved: { cost: string } });
    const one = addDecimal('0', tokenPrice(usage));
    expect(seen!.spending).toEqual({
      maxCost: {
        limit: '1',
        spent: one,
        reserved: second!.reserved.cost,
        remaining: subDecimal('1', addDecimal(one, second!.reserved.cost)),
      },
    });
    expect(first!.reserved.cost).toBeDefined();
    // settled: the result and the snapshot show the same figures, nothing reserved
    const two = addDecimal(one, one);
    expect(r.spending).toEqual({ maxCost: { limit: '1', spent: two, reserved: '0', remaining: subDecimal('1', two) } });
    expect(r.usage).toMatchObject({ inputTokens: 20, outputTokens: 10 });
  });

  it("`actorloop log` shows each model call's cost and `view` each step's", async () => {
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([
        { toolCalls: [{ name: 'echo', arguments: {} }], usage },
        { text: 'done', usage },
      ]),
      tools: [echo],
      pricing: tokenPrice,
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    const log = await collect(runtime.store.readEvents('s'));
    await runtime.close();
    const cost = addDecimal('0', tokenPrice(usage));
    const lines = log.filter((e) => e.type === 'assistant/message').map(formatLine);
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l).toContain(`cost ${cost}`);
    const steps = buildTimeline('s', log).spans.filter((x) => x.row === 'step');
    expect(steps.map((x) => x.label)).toEqual([`step 1 · ${cost}`, `step 2 · ${cost}`]);
  });

  it("each model call's span carries its cost (actorloop.model_call.cost)", async () => {
    const t = memoryTracing();
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ text: 'hi', usage }]),
      pricing: tokenPrice,
      tracing: { tracerProvider: t.provider },
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await runtime.close();
    const chat = t.spans().filter((x) => x.name.startsWith('chat '));
    expect(chat.map((x) => x.attributes['actorloop.model_call.cost'])).toEqual([tokenPrice(usage)]);
  });
});
