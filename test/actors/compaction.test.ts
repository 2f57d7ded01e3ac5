import { contentText } from '../../src/contracts/content.js';
import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { z } from 'zod';
import {
  createRuntime,
  DEFAULT_COMPACTION_PROMPT,
  defineTool,
  isCapacityError,
  isProviderError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type Message,
  type ModelMessage,
  type ModelProvider,
  type ModelRequest,
  type ScriptedStep,
} from '../../src/index.js';
import { ids, lmdbRuntime, logOf, memRuntime, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Compaction and the surface (DESIGN §2 loadSurface/epochs, §4 items 1 and 2;
 * docs/architecture.md "Compaction", "Request digests and token estimates").
 *
 * `filledSession`: contextWindow 1500, outputReserve 200 (limit 1300 estimated tokens, 4 chars a
 * token). Run r0 (a 2000-char prompt and a 2000-char answer) and run r1 ('short', a 2000-char
 * answer) fill the surface; the first model call of run r2 must compact first.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CFG = { contextWindow: 1500, outputReserve: 200 };
const isCompaction = (r: ModelRequest) => r.tools.length === 0 && r.messages[0]?.content === DEFAULT_COMPACTION_PROMPT;
const big = (c: string) => c.repeat(2000); // ≈ 500 estimated tokens
/** The runtime's own estimate (src/persistence/surface.ts): 4 characters a token, + 8 characters a message. */
const estimate = (ms: readonly ModelMessage[]) =>
  ms.reduce(
    (n, m) =>
      n + Math.ceil((m.content.length + 8 + (m.toolCalls ?? []).reduce((k, c) => k + c.name.length + c.arguments.length + 8, 0)) / 4),
    0,
  );
const echo = defineTool({
  name: 'echo',
  description: 'echoes',
  mode: 'parallel',
  parameters: z.object({ text: z.string() }),
  execute: ({ text }) => text,
});

/** Runs r0 and r1 (which fill the surface) on a fresh memory-store session. */
async function filledSession(model: ModelProvider, extra: Record<string, unknown> = {}) {
  const store = memoryStore();
  const runtime = createRuntime({ store, model, tools: [echo], config: { ...CFG, retryBackoffMs: 1 }, ...extra });
  cleanups.push(() => runtime.close());
  const s = await runtime.openSession('s');
  expect((await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: big('x') })).status).toBe('succeeded');
  expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'short' })).status).toBe('succeeded');
  return { store, runtime, s };
}

describe('compaction (real LMDB)', () => {
  it('compacts with the model when the surface outgrows the window; loadSurface then starts at the epoch', async () => {
    const big = 'x'.repeat(2000); // ~500 tokens each
    const model = scriptedModel([big, big, 'SUMMARY', 'after compaction']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: big });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'short' });
    expect(r.finalMessage).toBe(big);
    const r3 = await s.execute({ kind: 'prompt', ...ids(), message: 'third' });
    expect(r3.finalMessage).toBe('after compaction');
    const compactionReq = model.requests[2]!;
    expect(compactionReq.messages[0]!.content).toContain('Summarise the conversation');
    const log = await logOf(store, 's');
    const comp = log.find((e) => e.type === 'compaction')!;
    expect(comp).toMatchObject({ surfaceOp: 'epoch', payload: { summary: { content: expect.stringContaining('SUMMARY') } } });
    const surface = await store.loadSurface('s');
    expect(surface[0]!.seq).toBe(comp.seq);
    expect(model.requests[3]!.messages.some((m) => contentText(m.content).includes('SUMMARY'))).toBe(true);
    expect(model.requests[3]!.messages.some((m) => m.content === big)).toBe(false);
    // the current run's prompt survives compaction, after the summary
    expect(model.requests[3]!.messages.map((m) => m.content).slice(-1)).toEqual(['third']);
    expect(surface.map((e) => e.type)).toEqual(['compaction', 'user/message', 'assistant/message']);
  });

  it('a context that still does not fit after compaction is a CapacityError', async () => {
    const model = scriptedModel(['ok', 'SUMMARY']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 300, outputReserve: 100 } });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'small' })).status).toBe('succeeded');
    // the new prompt alone is too large: compacting the older part cannot help
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'y'.repeat(4000) });
    expect(r.status).toBe('failed');
    expect(isCapacityError(r.error!.cause)).toBe(true);
    expect(model.requests).toHaveLength(2); // one answer + one compaction call
    expect(typesOf(await logOf(store, 's'))).toContain('compaction');
  });

  it('compaction never leaves a tool result without the assistant message that called it', async () => {
    const big = 'x'.repeat(2000); // ≈ 500 tokens
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => 'y'.repeat(4000),
    });
    const model = scriptedModel(['ok', { toolCalls: [{ name: 'deploy', arguments: {} }] }, 'SUMMARY', 'deployed']);
    const { runtime } = lmdbRuntime({ model, tools: [deploy], config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: big });
    const id = ids();
    const r = await s.execute({ kind: 'prompt', ...id, message: 'deploy it' });
    expect(r.status).toBe('suspended');
    const pr = r.pendingRequest as { questionId: string; calls: { callId: string }[] };
    const r2 = await s.execute({
      kind: 'respond',
      runId: id.runId,
      attemptId: 'resp',
      questionId: pr.questionId,
      answer: { decisions: { [pr.calls[0]!.callId]: 'approve' } },
    });
    expect(r2.status).toBe('succeeded');
    expect(model.requests[2]!.messages[0]!.content).toContain('Summarise'); // a compaction happened
    const after = model.requests[3]!.messages;
    // every tool message follows an assistant message that asked for that call (providers refuse otherwise)
    const asked = new Set<string>();
    for (const m of after) {
      for (const c of m.toolCalls ?? []) asked.add(c.id);
      if (m.role === 'tool') expect(asked.has(m.toolCallId!)).toBe(true);
    }
  });
});

describe('the compaction model call', () => {
  it('the compaction model call gets the runtime retries: a retryable ProviderError is retried and logged as assistant/attempt', async () => {
    // DESIGN §4 item 2: "up to maxProviderAttempts attempts and exponential backoff ... each failed
    // attempt is an assistant/attempt event. The runtime owns every retry ... so no attempt goes unlogged."
    const model = scriptedModel([
      big('a'),
      big('b'),
      { error: { message: 'overloaded', retryable: true, code: 'server' } },
      'SUMMARY',
      'after',
    ]);
    const { store, s } = await filledSession(model);
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    const log = await logOf(store, 's');
    expect(
      log.filter((e) => e.type === 'assistant/attempt'),
      'the failed compaction attempt is logged',
    ).toHaveLength(1);
    expect(r.status).toBe('succeeded');
    expect(r.finalMessage).toBe('after');
    expect(log.some((e) => e.type === 'compaction')).toBe(true);
  });

  it("the compaction model call's response is checked: an invalid one fails with ProviderError invalid_response, never becomes the summary", async () => {
    // docs/guarantees.md: "A ModelProvider's response is checked on every call (assistant message,
    // usage, finish reason): a bad one fails that model call with a non-retryable ProviderError
    // (invalid_response), logged as an assistant/attempt, and the run ends failed."
    let n = 0;
    const model: ModelProvider = {
      modelId: 'custom',
      async call(req) {
        n++;
        // a custom provider's bad response: an assistant message without content
        if (isCompaction(req)) return { message: { role: 'assistant' }, finishReason: 'stop' } as never;
        return {
          message: { role: 'assistant', content: n <= 2 ? big('q') : 'after' },
          finishReason: 'stop',
          usage: { inputTokens: 10, outputTokens: 10 },
        };
      },
    };
    const { store, s } = await filledSession(model);
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    const comp = (await logOf(store, 's')).find((e) => e.type === 'compaction');
    expect((comp?.payload.summary as Message | undefined)?.content ?? '').not.toContain('undefined');
    expect(r.status).toBe('failed');
    expect(isProviderError(r.error?.cause)).toBe(true);
    expect(r.error?.cause).toMatchObject({ providerCode: 'invalid_response', retryable: false });
  });

  it("the compaction model call's usage and price count in the run's usage and cost", async () => {
    // DESIGN §4 item 8 / §6: maxOutputTokens and maxCost are "priced from usage"; "pricing(usage,
    // modelId) → decimal string prices a model call for maxCost". The summary is a model call of this run.
    const model = scriptedModel([big('a'), big('b'), { text: 'SUMMARY', usage: { inputTokens: 1000, outputTokens: 300 } }, 'after']);
    const { s } = await filledSession(model, {
      pricing: (u: { inputTokens: number; outputTokens: number }) => String(u.inputTokens + u.outputTokens),
    });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(r.status).toBe('succeeded');
    expect(model.requests.filter(isCompaction)).toHaveLength(1);
    expect(r.usage).toMatchObject({ inputTokens: 1010, outputTokens: 302 });
    expect(r.cost).toBe('1312');
  });

  it('a maxOutputTokens budget sees the output tokens of the compaction model call', async () => {
    const step = (text: string, outputTokens = 1): ScriptedStep => ({ text, usage: { inputTokens: 10, outputTokens } });
    const model = scriptedModel([
      step(big('a')),
      step(big('b')),
      step('SUMMARY', 300), // the compaction alone spends 300 output tokens
      { toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'hi' } }], usage: { inputTokens: 10, outputTokens: 1 } },
      step('after'),
    ]);
    const { s } = await filledSession(model, { budget: { maxOutputTokens: 50 } });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(model.requests.filter(isCompaction)).toHaveLength(1);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxOutputTokens' });
  });

  it('a summary call is reserved as any model call: its output is capped by what maxOutputTokens leaves, and its reservation is recorded', async () => {
    const step = (text: string): ScriptedStep => ({ text, usage: { inputTokens: 10, outputTokens: 1 } });
    const model = scriptedModel([step(big('a')), step(big('b')), step('SUMMARY'), step('after')]);
    const { s, store } = await filledSession(model, { budget: { maxOutputTokens: 50 } });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(r.status).toBe('succeeded');
    const [summary] = model.requests.filter(isCompaction);
    expect(summary!.maxOutputTokens).toBe(50);
    const comp = (await logOf(store, 's')).find((e) => e.type === 'compaction')!;
    expect(comp.payload).toMatchObject({ reserved: { outputTokens: 50 } });
  });

  it('a summary call whose usage never came back counts at its reservation in the run, never at zero, as the log records it', async () => {
    const step = (text: string): ScriptedStep => ({ text, usage: { inputTokens: 10, outputTokens: 1 } });
    const scripted = scriptedModel([step(big('a')), step(big('b')), step('SUMMARY'), step('after')]);
    // a provider that reports no usage for the summary call
    const model: ModelProvider = {
      modelId: scripted.modelId,
      call: async (req, onEvent) => {
        const { usage, ...res } = await scripted.call(req, onEvent);
        return isCompaction(req) ? res : { ...res, ...(usage ? { usage } : {}) };
      },
    };
    const { s, store } = await filledSession(model, { budget: { maxOutputTokens: 5000 } });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    const comp = (await logOf(store, 's')).find((e) => e.type === 'compaction')!.payload as { reserved: { outputTokens: number } };
    expect(comp).toMatchObject({ counted: 'reservation' });
    expect(r).toMatchObject({ status: 'succeeded', spending: { maxOutputTokens: { reserved: String(comp.reserved.outputTokens) } } });
  });

  it('a summary call whose worst case the budget cannot hold is not made: the run ends budget_exhausted naming the budget', async () => {
    const step = (text: string): ScriptedStep => ({ text, usage: { inputTokens: 10, outputTokens: 1 } });
    const model = scriptedModel([step(big('a')), step(big('b')), step('SUMMARY'), step('after')]);
    // a request of 1100 estimated input tokens or more is priced past maxCost: the summary
    // request (the older runs' transcript, about the window) is; r0's and r1's steps are not
    const pricing = (u: { inputTokens: number }) => (u.inputTokens >= 1100 ? '10' : '0');
    const { s } = await filledSession(model, { pricing, budget: { maxCost: '1' } });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(model.requests.filter(isCompaction)).toHaveLength(0);
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost' });
  });

  it("a summary call's wait for its rate limit ends when the run's maxDurationMs runs out: the run ends budget_exhausted, no summary asked", async () => {
    const clock = new SimulatedClock();
    clock.set(Date.now());
    const model = scriptedModel([big('a'), big('b'), 'SUMMARY', 'after'], { modelId: 'm' });
    // two requests a minute: r0 and r1 take them, r2's summary call waits for the next minute
    const { s } = await filledSession(model, {
      clock,
      rateLimits: [{ provider: 'actorloop.scripted', requestsPerMinute: 2 }],
      budget: { maxDurationMs: 10_000 },
    });
    let done = false;
    const r2 = s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' }).finally(() => (done = true));
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(done).toBe(false);
    clock.increment(10_000);
    expect(await r2).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
    expect(model.requests.filter(isCompaction)).toHaveLength(0);
  });

  // f9e40b0: "its usage counts in the step (result, cost, budgets, reopen)"; the fold counts the
  // compaction's usage, but the live run adds it only when the step's model call succeeds.
  it("a compaction's summary usage is in the result of a run whose step then fails", async () => {
    const big = (c: string) => c.repeat(2000);
    const model = scriptedModel([
      big('a'),
      big('b'),
      { text: 'SUMMARY', usage: { inputTokens: 700, outputTokens: 30 } },
      { error: { message: 'bad request', retryable: false, code: 'bad_request' } },
    ]);
    const store = memoryStore();
    const { runtime: rt } = memRuntime({ model, config: { contextWindow: 1500, outputReserve: 200, retryBackoffMs: 1 } }, store);
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: big('x') })).status).toBe('succeeded');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'short' })).status).toBe('succeeded');
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(r.status).toBe('failed');
    const log = await logOf(store, 's');
    const comp = log.find((e) => e.type === 'compaction');
    expect(comp?.payload.usage).toEqual({ inputTokens: 700, outputTokens: 30 });
    expect(r.usage.outputTokens).toBeGreaterThanOrEqual(30);
    expect(r.usage.inputTokens).toBeGreaterThanOrEqual(700);
  });

  it('an identical request gets the same request digest in a process reopened after a compaction as in the live process', async () => {
    // DESIGN §4 item 2: "a digest of its canonical request is recorded with the attempt, so a replay
    // can prove it sent the same request". Run r2 compacts, asks for echo (step 1), then answers
    // (step 2). One process runs it straight through; the other is closed during step 2's model
    // call and the run is continued in a new process, which sends byte-identical messages.
    const steps = (last: ScriptedStep): ScriptedStep[] => [
      big('a'),
      big('b'),
      'SUMMARY',
      { toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'hi' } }] },
      last,
    ];
    const liveModel = scriptedModel(steps('done'));
    const { store: liveStore } = await (async () => {
      const x = await filledSession(liveModel);
      expect((await x.s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' })).status).toBe('succeeded');
      return x;
    })();

    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const m1 = scriptedModel(steps({ text: 'never', delayMs: 10_000 }));
    const rt1 = createRuntime({ store: lmdbStore({ path: dir.path }), model: m1, tools: [echo], config: CFG });
    const s1 = await rt1.openSession('s');
    await s1.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: big('x') });
    await s1.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'short' });
    const pending = s1.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    while (m1.requests.length < 5) await new Promise((r) => setTimeout(r, 5));
    await rt1.close();
    expect((await pending).status).toBe('detached');

    const m2 = scriptedModel(['done']);
    const store2 = lmdbStore({ path: dir.path });
    const rt2 = createRuntime({ store: store2, model: m2, tools: [echo], config: CFG });
    cleanups.push(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    expect((await s2.execute({ kind: 'continue', runId: 'r2', attemptId: 'a2b' })).status).toBe('succeeded');
    // the same request, message for message
    expect(m2.requests[0]!.messages).toEqual(liveModel.requests.at(-1)!.messages);
    expect(m2.requests[0]!.tools).toEqual(liveModel.requests.at(-1)!.tools);
    const digest = async (st: EventStore) =>
      (await logOf(st, 's')).filter((e) => e.type === 'assistant/message' && e.payload.copiedFrom === undefined).at(-1)!.payload
        .requestDigest;
    expect(await digest(store2)).toBe(await digest(liveStore));
  });

  it('the summary request itself fits the context window', async () => {
    // DESIGN §4 item 1: the context may use contextWindow − outputReserve; "still too large →
    // CapacityError". Run r0's tool returns a result larger than the window, so r0 fails with
    // CapacityError at its next step (nothing older to summarise) and the result stays on the
    // surface. Every later prompt then compacts by sending that whole result to the model.
    const huge = defineTool({ name: 'huge', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'h'.repeat(8000) }); // ≈ 2000 tokens
    const model = scriptedModel([{ toolCalls: [{ id: 'h1', name: 'huge', arguments: {} }] }, 'SUMMARY', 'answer']);
    const store = memoryStore();
    const runtime = createRuntime({ store, model, tools: [huge], config: CFG });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: 'fetch it' })).status).toBe('failed');
    await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'next' });
    const limit = CFG.contextWindow - CFG.outputReserve;
    const sizes = model.requests.map((q) => estimate(q.messages));
    for (const [i, n] of sizes.entries())
      expect(n, `request ${i} (${isCompaction(model.requests[i]!) ? 'compaction' : 'step'}) fits the window`).toBeLessThanOrEqual(limit);
  });
});

describe('fitLines (the summary request fits the context)', () => {
  it('keeps lines that fit, cuts overly long ones in the middle with a marker, and gives up when even short lines do not fit', async () => {
    const { fitLines } = await import('../../src/actors/compaction.js');
    expect(fitLines(['a', 'b'], 10)).toBe('a\nb');
    const long = `${'h'.repeat(500)}${'m'.repeat(2000)}${'t'.repeat(500)}`;
    const out = fitLines(['short one', long], 1000)!;
    expect(out.length).toBeLessThanOrEqual(1000);
    expect(out.startsWith('short one\nhhh')).toBe(true);
    expect(out.endsWith('ttt')).toBe(true);
    expect(out).toMatch(/\[… \d+ characters cut …\]/);
    expect(
      fitLines(
        Array.from({ length: 100 }, () => 'x'.repeat(500)),
        1000,
      ),
    ).toBeUndefined();
  });
});
