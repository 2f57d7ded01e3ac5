import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  lmdbStore,
  memoryStore,
  ProviderError,
  scriptedModel,
  type EventRecord,
  type ModelProvider,
  type ModelRequest,
  type Usage,
} from '../../src/index.js';
import { addDecimal, decimalAtLeast } from '../../src/contracts/budget.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { deferred } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { tokenPrice } from '../crash/budget-pricing.js';

// A child's spending comes out of its parent's remaining budget (docs/agents.md, "Budgets").

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const noop = defineTool({ name: 'noop', description: 'does nothing', mode: 'parallel', parameters: z.object({}), execute: () => 'ok' });

/**
 * A model that keeps calling `noop` and bills every call at the output cap it was sent (the worst
 * case); `hangAt`: that call is billed and never answers (the process dies in it).
 */
function spender(
  modelId: string,
  billed: Usage[],
  toolCalls: (r: ModelRequest, n: number) => unknown[] | undefined,
  hangAt?: { n: number; reached: () => void },
): ModelProvider {
  let n = 0;
  return {
    modelId,
    maxOutputTokens: 20,
    async call(req) {
      n++;
      await sleep(5); // the siblings' calls interleave
      const usage = { inputTokens: 1, outputTokens: req.maxOutputTokens ?? 20 };
      billed.push(usage);
      if (hangAt?.n === n) {
        hangAt.reached();
        await new Promise(() => {});
      }
      const calls = toolCalls(req, n) ?? [{ id: `t${n}`, name: 'noop', arguments: '{}' }];
      return {
        message: { role: 'assistant', content: calls.length === 0 ? 'done' : '', toolCalls: calls as never },
        usage,
        finishReason: calls.length === 0 ? 'stop' : 'tool_calls',
      };
    },
  };
}

/** What a log counts: its model calls' reported usage priced, and the calls counted at their reservation. */
function loggedCost(log: readonly EventRecord[]): string {
  let cost = '0';
  for (const e of log) {
    const p = e.payload as { usage?: Usage; counted?: string; reserved?: { cost?: string }; recoveredReservation?: { cost?: string } };
    if ((e.type === 'assistant/message' || e.type === 'compaction') && p.usage) cost = addDecimal(cost, tokenPrice(p.usage));
    if (e.type === 'assistant/attempt' && p.counted === 'reservation') cost = addDecimal(cost, p.reserved?.cost ?? '0');
    if (e.type === 'run/start' && p.recoveredReservation) cost = addDecimal(cost, p.recoveredReservation.cost ?? '0');
  }
  return cost;
}

const CHILDREN = ['s/r/1/c1', 's/r/1/c2'];

describe('budgets of sub-agents', () => {
  it("two parallel children cannot spend more than their parent has left: the tree's priced usage, read from every log, stays within the parent's maxCost", async () => {
    const store = memoryStore();
    const billed: Usage[] = [];
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'Research.',
      // a budget of its own far above the parent's: only the parent's remaining holds the child back
      budget: { maxCost: '5', maxSteps: 40 },
      model: spender('researcher-model', billed, () => undefined),
      tools: [noop],
    });
    const parentModel = spender('orchestrator-model', billed, (_r, n) =>
      n === 1
        ? [
            { id: 'c1', name: 'researcher', arguments: JSON.stringify({ input: 'alpha' }) },
            { id: 'c2', name: 'researcher', arguments: JSON.stringify({ input: 'beta' }) },
          ]
        : [],
    );
    const runtime = createRuntime({
      store,
      model: parentModel,
      tools: [agentTool(researcher, { mode: 'parallel' })],
      pricing: tokenPrice,
      budget: { maxCost: '0.1' },
    });
    cleanups.push(() => runtime.close());
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });

    const parentLog = await logOf(store, 's');
    const childLogs = await Promise.all(CHILDREN.map((id) => logOf(store, id)));
    const tree = [parentLog, ...childLogs].reduce((sum, log) => addDecimal(sum, loggedCost(log)), '0');
    const bill = billed.reduce((sum, u) => addDecimal(sum, tokenPrice(u)), '0');
    expect(decimalAtLeast('0.1', tree), `the tree's logs count ${tree}`).toBe(true);
    expect(decimalAtLeast('0.1', bill), `the model billed ${bill}`).toBe(true);
    expect(decimalAtLeast(tree, bill)).toBe(true);
    // both children ran (in parallel) until the parent's remaining could not hold a call
    for (const log of childLogs) {
      const end = log.filter((e) => e.type === 'run/end').at(-1)!.payload as {
        result: { status: string; budget?: string; budgetOwner?: string };
      };
      expect(end.result).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost', budgetOwner: 's' });
    }
    // the parent's results say so, and its own figures hold the whole tree's spending
    const results = parentLog.filter((e) => e.type === 'tool/result').map((e) => (e.payload.outcome as { content: string }).content);
    for (const content of results) expect(content).toMatch(/ended budget_exhausted: maxCost of session s/);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost' });
    expect(addDecimal(r.cost!, r.counted?.cost ?? '0')).toBe(tree);
    expect(r.spending?.maxCost).toMatchObject({ limit: '0.1', spent: r.cost });
  });

  it("a child's cost and the reservations its failed attempts counted roll up into the parent's cost and result.spending (its snapshot shows them reserved while the child runs)", async () => {
    const store = memoryStore();
    const u = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens });
    let failed = false;
    let parentSeen: string | undefined; // the parent's snapshot while its child's call runs
    const childModel: ModelProvider = {
      modelId: 'researcher-model',
      maxOutputTokens: 50,
      async call(_req, onEvent) {
        if (!failed) {
          failed = true;
          onEvent({ type: 'text_delta', text: 'half' });
          throw new ProviderError('dropped after output', { retryable: true, code: 'server', partialOutput: true });
        }
        parentSeen = parent.snapshot().spending?.maxCost?.reserved;
        return { message: { role: 'assistant', content: 'tea: a drink' }, usage: u(100, 30), finishReason: 'stop' };
      },
    };
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const parentModel = scriptedModel([
      { toolCalls: [{ id: 'c1', name: 'researcher', arguments: { input: 'tea?' } }], usage: u(10, 2) },
      { text: 'Tea is a drink.', usage: u(20, 4) },
    ]);
    const runtime = createRuntime({
      store,
      model: parentModel,
      tools: [agentTool(researcher)],
      pricing: tokenPrice,
      budget: { maxCost: '1' },
      config: { retryBackoffMs: 1 },
    });
    cleanups.push(() => runtime.close());
    const parent = await runtime.openSession('s');
    const r = await parent.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(r.status).toBe('succeeded');
    const childEnd = (await logOf(store, 's/r/1/c1')).find((e) => e.type === 'run/end')!.payload as {
      result: { cost: string; counted: { cost: string } };
    };
    const own = addDecimal(tokenPrice(u(10, 2)), tokenPrice(u(20, 4)));
    expect(childEnd.result.cost).toBe(addDecimal(tokenPrice(u(100, 30)), '0'));
    expect(decimalAtLeast(childEnd.result.counted.cost, '0.001')).toBe(true);
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ cost: childEnd.result.cost, counted: childEnd.result.counted });
    const spent = addDecimal(own, childEnd.result.cost);
    expect(r.cost).toBe(spent);
    expect(r.counted).toEqual(childEnd.result.counted);
    expect(r.spending?.maxCost).toMatchObject({ limit: '1', spent, reserved: childEnd.result.counted.cost });
    // while the child's call ran, the parent's snapshot held the child's failed attempt and its call in flight
    const held = (outcome as { counted: { cost: string } }).counted.cost;
    expect(parentSeen !== undefined && decimalAtLeast(parentSeen, held) && parentSeen !== held, `reserved ${parentSeen}`).toBe(true);
  });

  it("a parent waiting on its child's request holds what the child spent so far (result.spending and snapshot); answered in another life, the child's spending is the parent's own, counted once", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const u = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens });
    // each life's models go on from where the last one stopped
    const tree = (life: 1 | 2) => {
      const charge = defineTool({
        name: 'charge',
        description: '',
        parameters: z.object({}),
        needsApproval: true,
        execute: () => 'charged',
      });
      const payer = defineAgent({
        name: 'payer',
        instructions: 'p',
        model: scriptedModel(
          life === 1
            ? [{ toolCalls: [{ id: 'k1', name: 'charge', arguments: {} }], usage: u(100, 30) }]
            : [{ text: 'paid', usage: u(50, 7) }],
        ),
        tools: [charge],
      });
      const runtime = createRuntime({
        store: lmdbStore({ path: dir.path }),
        model: scriptedModel(
          life === 1
            ? [{ toolCalls: [{ id: 'c1', name: 'payer', arguments: { input: 'pay' } }], usage: u(10, 2) }]
            : [{ text: 'done', usage: u(20, 4) }],
        ),
        tools: [agentTool(payer)],
        pricing: tokenPrice,
        budget: { maxCost: '1', maxOutputTokens: 1000 },
      });
      cleanups.push(() => runtime.close());
      return runtime;
    };
    const first = tree(1);
    const s1 = await first.openSession('s');
    const suspended = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(suspended.status).toBe('suspended');
    const child = tokenPrice(u(100, 30));
    // the parent's own figures are its own model call's; the child's 30 tokens are held for it
    expect(suspended.spending?.maxOutputTokens).toMatchObject({ spent: '2', reserved: '30', remaining: '968' });
    expect(suspended.spending?.maxCost).toMatchObject({ spent: addDecimal(tokenPrice(u(10, 2)), '0'), reserved: addDecimal(child, '0') });
    expect(s1.snapshot().spending).toEqual(suspended.spending);
    await first.close();
    // another life: the parent's next attempt finds the child still waiting (the answer is for it), then answers
    const runtime = tree(2);
    const s2 = await runtime.openSession('s', { resume: 'manual' });
    const questionId = suspended.pendingRequest!.questionId;
    const r = await s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId, answer: { decisions: { k1: 'approve' } } });
    expect(r.status).toBe('succeeded');
    // the child's two calls counted once, in spent, beside the parent's two
    expect(r.spending?.maxOutputTokens).toMatchObject({ spent: String(2 + 30 + 7 + 4), reserved: '0' });
  });

  it("a child's overruns (usage reported above its calls' reservations) are named on its parent's result.spending.overruns, with the child's session", async () => {
    const store = memoryStore();
    const childModel = scriptedModel([{ text: 'tea: a drink', usage: { inputTokens: 90_000, outputTokens: 3 } }]);
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const parentModel = scriptedModel([
      { toolCalls: [{ id: 'c1', name: 'researcher', arguments: { input: 'tea?' } }], usage: { inputTokens: 10, outputTokens: 2 } },
      { text: 'Tea is a drink.', usage: { inputTokens: 20, outputTokens: 4 } },
    ]);
    const runtime = createRuntime({
      store,
      model: parentModel,
      tools: [agentTool(researcher)],
      pricing: tokenPrice,
      budget: { maxCost: '100' },
    });
    cleanups.push(() => runtime.close());
    const parent = await runtime.openSession('s');
    const r = await parent.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(r.status).toBe('succeeded');
    const childMsg = (await logOf(store, 's/r/1/c1')).find((e) => e.type === 'assistant/message')!.payload as {
      reserved: { inputTokens: number };
    };
    const overrun = { step: 1, session: 's/r/1/c1', inputTokens: { estimated: childMsg.reserved.inputTokens, reported: 90_000 } };
    expect(r.spending?.overruns).toEqual([expect.objectContaining(overrun)]);
    // the call's result in the parent's log carries it, as it carries the child's cost
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome as { overruns?: unknown };
    expect(outcome.overruns).toEqual([expect.objectContaining(overrun)]);
  });

  it('a child resumed after a crash spends from what its parent has left net of what the child recorded before: the tree stays within maxCost', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const billed: Usage[] = [];
    const single = (_r: ModelRequest, n: number) => (n === 1 ? [{ id: 'c1', name: 'researcher', arguments: '{"input":"tea"}' }] : []);
    const lifeOf = (hangAt?: { n: number; reached: () => void }) =>
      createRuntime({
        store: lmdbStore({ path: dir.path }),
        model: spender('orchestrator-model', billed, single),
        tools: [
          agentTool(
            defineAgent({
              name: 'researcher',
              instructions: 'Research.',
              budget: { maxCost: '5', maxSteps: 40 },
              model: spender('researcher-model', billed, () => undefined, hangAt),
              tools: [noop],
            }),
          ),
        ],
        pricing: tokenPrice,
        budget: { maxCost: '0.15' },
      });
    // life 1: the child spends, and the process dies in its third model call (billed, never logged)
    const hung = deferred();
    const first = lifeOf({ n: 3, reached: () => hung.resolve() });
    void (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await hung.promise;
    // life 2: the parent continues its call, which continues the child's run
    const second = lifeOf();
    cleanups.push(() => second.close());
    const r = await (await second.openSession('s')).execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    const logs = [await logOf(second.store, 's'), await logOf(second.store, 's/r/1/c1')];
    const tree = logs.reduce((sum, log) => addDecimal(sum, loggedCost(log)), '0');
    const bill = billed.reduce((sum, u) => addDecimal(sum, tokenPrice(u)), '0');
    expect(decimalAtLeast('0.15', tree), `the tree's logs count ${tree}`).toBe(true);
    expect(decimalAtLeast('0.15', bill), `the models billed ${bill}`).toBe(true);
    expect(logs[1]!.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
    expect(r.status).toBe('budget_exhausted');
    expect(addDecimal(r.cost!, r.counted?.cost ?? '0')).toBe(tree);
  });

  it("a child's try that ended without its answer (its run/end append failed) takes back what it counted: its retry and its siblings see the pool counted once", async () => {
    const caps: (number | undefined)[] = [];
    const child: ModelProvider = {
      modelId: 'child',
      maxOutputTokens: 30,
      call: async (req) => {
        caps.push(req.maxOutputTokens);
        return { message: { role: 'assistant', content: 'answer' }, usage: { inputTokens: 1, outputTokens: 30 }, finishReason: 'stop' };
      },
    };
    const parent = scriptedModel([
      {
        toolCalls: [
          { id: 'c1', name: 'researcher', arguments: { input: 'a' } },
          { id: 'c2', name: 'researcher', arguments: { input: 'b' } },
        ],
        usage: { inputTokens: 1, outputTokens: 0 },
      },
      { text: 'done', usage: { inputTokens: 1, outputTokens: 0 } },
    ]);
    const inner = memoryStore();
    let failed = false;
    // the first child's closing commit (its run/end) fails once: its call opens it again and takes what its log holds
    const store = new Proxy(inner, {
      get(target, key, receiver) {
        if (key !== 'append') {
          const v = Reflect.get(target, key, receiver);
          return typeof v === 'function' ? v.bind(target) : v;
        }
        return (id: string, epoch: number, seq: number, drafts: { type: string }[]) => {
          if (!failed && id === 's/r/1/c1' && drafts.some((d) => d.type === 'run/end')) {
            failed = true;
            return Promise.reject(new Error('transient: append failed'));
          }
          return target.append(id, epoch, seq, drafts as never);
        };
      },
    });
    const researcher = defineAgent({ name: 'researcher', instructions: 'research', model: child });
    const runtime = createRuntime({
      store,
      model: parent,
      tools: [agentTool(researcher, { mode: 'exclusive' })],
      budget: { maxOutputTokens: 75 },
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(failed).toBe(true);
    expect(r.status).toBe('succeeded');
    // each child's one model call reserved its cap from what the parent had left: 75, then 75 - 30 (not 75 - 60)
    expect(caps).toEqual([30, 30]);
    expect(r.usage.outputTokens).toBe(60);
  });
});
