import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  DEFAULT_COMPACTION_PROMPT,
  isProviderError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type Message,
  type ModelProvider,
  type ModelRequest,
  type ScriptedStep,
} from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Review of compaction and the surface (DESIGN §2 loadSurface/epochs, §4 items 1 and 2;
 * docs/architecture.md "Compaction", "Request digests and token estimates").
 *
 * Shared setup: contextWindow 1500, outputReserve 200 (limit 1300 estimated tokens, 4 chars a
 * token). Run r0 (a 2000-char prompt and a 2000-char answer) and run r1 ('short', a 2000-char
 * answer) fill the surface; the first model call of run r2 must compact first.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CFG = { contextWindow: 1500, outputReserve: 200 };
const isCompaction = (r: ModelRequest) => r.tools.length === 0 && r.messages[0]?.content === DEFAULT_COMPACTION_PROMPT;
const logOf = (store: EventStore, id = 's'): Promise<EventRecord[]> => collect(store.readEvents(id));
const big = (c: string) => c.repeat(2000); // ≈ 500 estimated tokens
/** The runtime's own estimate (src/actors/surface.ts): 4 characters a token, + 8 characters a message. */
const estimate = (ms: readonly Message[]) => ms.reduce((n, m) => n + Math.ceil((m.content.length + 8 + (m.toolCalls ?? []).reduce((k, c) => k + c.name.length + c.arguments.length + 8, 0)) / 4), 0);

const echo = defineTool({ name: 'echo', description: 'echoes', mode: 'parallel', parameters: z.object({ text: z.string() }), execute: ({ text }) => text });

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

describe('compaction review', () => {
  it('the compaction model call gets the runtime retries: a retryable ProviderError is retried and logged as assistant/attempt', async () => {
    // DESIGN §4 item 2: "up to maxProviderAttempts attempts and exponential backoff ... each failed
    // attempt is an assistant/attempt event. The runtime owns every retry ... so no attempt goes unlogged."
    const model = scriptedModel([big('a'), big('b'), { error: { message: 'overloaded', retryable: true, code: 'server' } }, 'SUMMARY', 'after']);
    const { store, s } = await filledSession(model);
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    const log = await logOf(store);
    // observed: the run fails at once with the first 'overloaded' error, and the log holds no assistant/attempt
    expect(log.filter((e) => e.type === 'assistant/attempt'), 'the failed compaction attempt is logged').toHaveLength(1);
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
        return { message: { role: 'assistant', content: n <= 2 ? big('q') : 'after' }, finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 10 } };
      },
    };
    const { store, s } = await filledSession(model);
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    const comp = (await logOf(store)).find((e) => e.type === 'compaction');
    // observed: the run succeeds and the history was replaced by "Summary of the conversation so far:\nundefined"
    expect((comp?.payload.summary as Message | undefined)?.content ?? '').not.toContain('undefined');
    expect(r.status).toBe('failed');
    expect(isProviderError(r.error?.cause)).toBe(true);
    expect(r.error?.cause).toMatchObject({ providerCode: 'invalid_response', retryable: false });
  });

  it("the compaction model call's usage and price count in the run's usage and cost", async () => {
    // DESIGN §4 item 8 / §6: maxOutputTokens and maxCost are "priced from usage"; "pricing(usage,
    // modelId) → decimal string prices a model call for maxCost". The summary is a model call of this run.
    const model = scriptedModel([big('a'), big('b'), { text: 'SUMMARY', usage: { inputTokens: 1000, outputTokens: 300 } }, 'after']);
    const { s } = await filledSession(model, { pricing: (u: { inputTokens: number; outputTokens: number }) => String(u.inputTokens + u.outputTokens) });
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(r.status).toBe('succeeded');
    expect(model.requests.filter(isCompaction)).toHaveLength(1);
    // observed: usage { inputTokens: 10, outputTokens: 2 }, cost "12" — the compaction's 1000 + 300 are lost
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
    // observed: succeeded after a second model call, 301 output tokens spent against a budget of 50
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxOutputTokens' });
  });

  it('an identical request gets the same request digest in a process reopened after a compaction as in the live process', async () => {
    // DESIGN §4 item 2: "a digest of its canonical request is recorded with the attempt, so a replay
    // can prove it sent the same request". Run r2 compacts, asks for echo (step 1), then answers
    // (step 2). One process runs it straight through; the other is closed during step 2's model
    // call and the run is continued in a new process, which sends byte-identical messages.
    const steps = (last: ScriptedStep): ScriptedStep[] => [big('a'), big('b'), 'SUMMARY', { toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'hi' } }] }, last];
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
    const digest = async (st: EventStore) => (await logOf(st)).filter((e) => e.type === 'assistant/message' && e.payload.copiedFrom === undefined).at(-1)!.payload.requestDigest;
    // observed: different digests — the reopened process hashes [prefix, summary, …] in one go,
    // the live one chained it over its earlier calls since the epoch
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
    // observed: the compaction request is ≈ 2030 estimated tokens, over the whole 1500-token window
    for (const [i, n] of sizes.entries()) expect(n, `request ${i} (${isCompaction(model.requests[i]!) ? 'compaction' : 'step'}) fits the window`).toBeLessThanOrEqual(limit);
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
    expect(fitLines(Array.from({ length: 100 }, () => 'x'.repeat(500)), 1000)).toBeUndefined();
  });
});
