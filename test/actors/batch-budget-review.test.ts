// Review of tool batches and budgets (DESIGN §4 items 5–8, §6; docs/guarantees.md).
// Each `it` below is a defect found in review and fails until it is fixed.
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel, ValidationError, type EventStore, type RuntimeOptions } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { Message } from '../../src/contracts/message.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const open: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of open.splice(0)) await c();
});

function rt(options: Omit<RuntimeOptions, 'store'>, store: EventStore = memoryStore()) {
  const runtime = createRuntime({ ...options, store });
  open.push(() => runtime.close());
  return { runtime, store };
}

async function logOf(store: EventStore, id: string): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(id)) out.push(e);
  return out;
}

let n = 0;
const ids = () => ({ runId: `run-${++n}`, attemptId: `att-${n}` });

/** Every tool call in the log has a tool/result (or a batch rejection) — none is left unanswered. */
function unansweredCalls(log: EventRecord[]): string[] {
  const answered = new Set<string>();
  for (const e of log) {
    if (e.type === 'tool/result') answered.add(e.payload.callId as string);
    if (e.type === 'tool/batch-rejected') for (const i of e.payload.issues as { callId: string }[]) answered.add(i.callId);
  }
  const asked = log.filter((e) => e.type === 'assistant/message').flatMap((e) => ((e.payload.message as Message).toolCalls ?? []).map((c) => c.id));
  return asked.filter((id) => !answered.has(id));
}

/** Tool call ids of assistant messages in a model request that have no tool message answering them. */
function unansweredInRequest(messages: readonly Message[]): string[] {
  const answered = new Set(messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
  return messages.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : [])).filter((id) => !answered.has(id));
}

/** A memoryStore whose getHead fails once, right after the step's intent (tool/call) is committed. */
function storeFailingFenceCheck(): { store: EventStore; inner: EventStore } {
  const inner = memoryStore();
  let armed = false;
  const store: EventStore = {
    attachWriter: (id) => inner.attachWriter(id),
    append: async (id, epoch, seq, drafts) => {
      const r = await inner.append(id, epoch, seq, drafts);
      if (drafts.some((d) => d.type === 'tool/call')) armed = true;
      return r;
    },
    readEvents: (id, r) => inner.readEvents(id, r),
    loadSurface: (id) => inner.loadSurface(id),
    getHead: async (id) => {
      if (armed) {
        armed = false;
        throw new Error('transient read error');
      }
      return inner.getHead(id);
    },
    getEventById: (id, e) => inner.getEventById(id, e),
    listSessions: () => inner.listSessions(),
    events$: (id, o) => inner.events$(id, o),
    close: () => inner.close(),
  };
  return { store, inner };
}

describe('tool batches and budgets — review', () => {
  // guarantees.md, Tools: "Whatever a tool throws (even a value whose `String()` throws) becomes an
  // error result, and an outcome the log cannot record ... becomes an error result too, so no call is
  // left unanswered." A synchronous tool's return value is normalised outside any try: a value whose
  // `kind` getter throws makes the call actor fail (`call.failed`), the batch errors, and the run ends
  // `failed` with the tool/call (and the parallel sibling it aborted) never answered.
  it('a sync tool returning a value whose getter throws gets an error result; no call of the batch is left unanswered', async () => {
    let siblingRan = false;
    const slow = defineTool({ name: 'slow', description: '', mode: 'parallel', parameters: z.object({}), execute: async () => (await sleep(30), (siblingRan = true), 'slow done') });
    const bad = defineTool({
      name: 'bad',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () =>
        ({
          get kind(): 'completed' {
            throw new Error('getter boom');
          },
        }) as never,
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }, { name: 'bad', arguments: {} }] }, 'done']);
    const { runtime, store } = rt({ model, tools: [slow, bad] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const log = await logOf(store, 's');
    expect(unansweredCalls(log)).toEqual([]);
    const badResult = log.find((e) => e.type === 'tool/result' && e.payload.name === 'bad');
    expect(badResult?.payload.outcome).toMatchObject({ kind: 'completed', isError: true });
    expect(r.status).toBe('succeeded');
    expect(siblingRan).toBe(true);
  });

  // guarantees.md: "so no tool call is ever left unanswered on the surface"; "Failed commits within a
  // process ... a tool that ran is never left without its result on a settled run". An exclusive call's
  // fence check (a store read) that fails transiently makes the call actor fail: the run is settled
  // (`run/end failed`) with the call's tool/call and no tool/result, and every later prompt of the
  // session sends the model an assistant tool call with no answer (providers refuse that request).
  it('a transient store error in an exclusive call fence check does not leave the call unanswered on a settled run', async () => {
    const { store, inner } = storeFailingFenceCheck();
    let ran = 0;
    const exc = defineTool({ name: 'exc', description: '', parameters: z.object({}), execute: () => (ran++, 'done') });
    const model = scriptedModel([{ toolCalls: [{ name: 'exc', arguments: {} }] }, 'done', 'second answer']);
    const { runtime } = rt({ model, tools: [exc] }, store);
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toBe(0);
    const log = await logOf(inner, 's');
    expect(log.at(-1)?.type).toBe('run/end');
    // the call never started: it must still be answered (e.g. skipped) before the run settles
    expect(unansweredCalls(log)).toEqual([]);
    await s.execute({ kind: 'prompt', ...ids(), message: 'next' });
    expect(unansweredInRequest(model.requests.at(-1)!.messages)).toEqual([]);
    // the call is answered `skipped` (it never started) and the model goes on from there
    expect(log.find((e) => e.type === 'tool/result')?.payload.outcome).toMatchObject({ kind: 'skipped' });
    expect(r.status).toBe('succeeded');
  });

  // DESIGN §4 item 8 / §6: `maxCost` is a decimal string and `pricing` returns decimal strings, and the
  // run's result reports `cost`. parseDecimal silently truncates past 18 places, so long prices are
  // summed wrongly and a run that spent exactly its maxCost runs on (here to maxSteps), reporting a
  // cost it did not spend. (Float arithmetic would not even get the second case wrong.)
  it.each([
    { prices: ['0.1234567890123456789', '0.1234567890123456789'], maxCost: '0.2469135780246913578', cost: '0.2469135780246913578' },
    { prices: ['0.0000000000000000005', '0.0000000000000000005'], maxCost: '0.000000000000000001', cost: '0.000000000000000001' },
  ])('maxCost is exact for decimals longer than 18 places: $prices vs $maxCost', async ({ prices, maxCost, cost }) => {
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });
    let i = 0;
    const { runtime } = rt({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: {} }], usage: { inputTokens: 1, outputTokens: 1 } }], { loop: true }),
      tools: [echo],
      pricing: () => prices[i++] ?? '0',
      budget: { maxCost, maxSteps: 8 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost', steps: 2, cost });
  });

  // DESIGN §4 item 8: "`maxCost` (decimal string, priced from usage)"; guarantees.md, Bad input: options
  // are checked so that a mistake does not "quietly be its default" (api-boundary test: "refused, not a
  // run with no cost cap"). A `maxCost` given without `pricing` can never be spent: cost stays "0" and
  // the run is silently uncapped (here it runs until maxSteps).
  it('a maxCost budget without a pricing function is refused, not a run with no cost cap', async () => {
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });
    const make = () =>
      createRuntime({
        store: memoryStore(),
        model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: {} }], usage: { inputTokens: 1_000_000, outputTokens: 1_000_000 } }], { loop: true }),
        tools: [echo],
        budget: { maxCost: '0.01', maxSteps: 5 },
      });
    let runtime: ReturnType<typeof make> | undefined;
    try {
      runtime = make();
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      return;
    }
    open.push(() => runtime!.close());
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    // accepted silently: the cap was never applied
    expect(r).not.toMatchObject({ status: 'budget_exhausted', budget: 'maxSteps', cost: '0' });
  });

  // DESIGN §4 item 5: each call's context carries an `idempotencyKey` (stable across recovery);
  // guarantees.md: exclusive calls are passed to `reconcile(args, ctx)` "with the same idempotencyKey".
  // The key is `${sessionId}/${runId}/${callId}`: a provider that numbers its call ids per message
  // (call_0, call_0, …) gives two different calls of one run the same key, so an idempotent backend
  // (or reconcile looking the key up) treats the second charge as the first.
  it('two different calls of one run get different idempotency keys even when the model reuses a call id', async () => {
    const keys: string[] = [];
    const charge = defineTool({ name: 'charge', description: '', parameters: z.object({ amount: z.number() }), execute: ({ amount }, ctx) => (keys.push(ctx.idempotencyKey), `charged ${amount}`) });
    const model = scriptedModel([
      { toolCalls: [{ id: 'call_0', name: 'charge', arguments: { amount: 1 } }] },
      { toolCalls: [{ id: 'call_0', name: 'charge', arguments: { amount: 2 } }] },
      'done',
    ]);
    const { runtime } = rt({ model, tools: [charge] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(keys).toHaveLength(2);
    expect(keys[0]).not.toBe(keys[1]);
  });

  // guarantees.md: "no tool call is ever left unanswered on the surface"; a prompt's messages logged as
  // user/message "must have role user (no tool calls, no tool result)". `completed.additionalMessages`
  // are logged as user/message with no such check: an additional message carrying a tool call puts an
  // assistant tool call nobody answers on the surface, and the next model request contains it.
  it('additionalMessages cannot put an unanswered tool call on the surface', async () => {
    const t = defineTool({
      name: 't',
      description: '',
      parameters: z.object({}),
      execute: () => ({ kind: 'completed', content: 'ok', additionalMessages: [{ role: 'assistant', content: '', toolCalls: [{ id: 'ghost', name: 't', arguments: '{}' }] }] }),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 't', arguments: {} }] }, 'done']);
    const { runtime } = rt({ model, tools: [t] });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(model.requests).toHaveLength(2);
    expect(unansweredInRequest(model.requests[1]!.messages)).toEqual([]);
  });
});
