import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { createRuntime, memoryStore, scriptedModel, type ModelProvider, type SharedBuckets } from '../../src/index.js';
import { defineTool } from '../../src/index.js';
import { z } from 'zod';
import { ProviderError } from '../../src/contracts/errors.js';
import type { LiveEvent } from '../../src/streams/envelopes.js';

const settle = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
const prompt = (runId: string) => ({ kind: 'prompt' as const, runId, attemptId: `${runId}-a`, message: 'go' });
const closing: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closing.splice(0)) await c();
});

function clocked() {
  const clock = new SimulatedClock();
  clock.set(Date.now());
  return clock;
}

/** A runtime of one request a minute on the scripted provider, and its session `s2` already held back by `s1`'s call. */
async function oneAMinute(extra: { budget?: { maxDurationMs: number } } = {}) {
  const clock = clocked();
  const runtime = createRuntime({
    store: memoryStore(),
    clock,
    model: scriptedModel(['one', 'two'], { modelId: 'm' }),
    rateLimits: [{ provider: 'actorloop.scripted', requestsPerMinute: 1 }],
    ...extra,
  });
  closing.push(() => runtime.close());
  const s1 = await runtime.openSession('s1');
  const s2 = await runtime.openSession('s2');
  expect(await s1.execute(prompt('r1'))).toMatchObject({ status: 'succeeded' });
  const waits: LiveEvent[] = [];
  s2.events$.subscribe((e) => e.event.type === 'rate_limit_wait' && waits.push(e.event));
  let done = false;
  const second = s2.execute(prompt('r2')).finally(() => (done = true));
  await settle();
  return { clock, s2, waits, second, done: () => done };
}

describe('the runtime option rateLimits', () => {
  it("refuses a limit's misspelt key (ValidationError)", () => {
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel([]), rateLimits: [{ requestPerMinute: 5 } as never] })).toThrow(
      /rateLimits/,
    );
  });

  it("holds a session's call back while another session used the shared limit, shown live until it is granted", async () => {
    const { clock, waits, second, done } = await oneAMinute();
    expect(done()).toBe(false);
    expect(waits).toEqual([
      { type: 'rate_limit_wait', step: 1, state: 'waiting', limit: 'actorloop.scripted/* requestsPerMinute', ahead: 0 },
    ]);
    clock.increment(59_000);
    await settle();
    expect(done()).toBe(false);
    clock.increment(1_000);
    expect(await second).toMatchObject({ status: 'succeeded' });
    expect(waits[1]).toEqual({
      type: 'rate_limit_wait',
      step: 1,
      state: 'granted',
      limit: 'actorloop.scripted/* requestsPerMinute',
      waitedMs: 60_000,
    });
  });

  it("ends a call waiting for its rate limit when the run's maxDurationMs runs out", async () => {
    const { clock, second, waits } = await oneAMinute({ budget: { maxDurationMs: 10_000 } });
    expect(waits).toHaveLength(1);
    clock.increment(10_000);
    expect(await second).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
  });

  it('ends a call waiting for its rate limit when the run is cancelled', async () => {
    const { s2, second } = await oneAMinute();
    await s2.requestCancel();
    expect(await second).toMatchObject({ status: 'cancelled' });
  });

  it('ends a call waiting for its rate limit when the run is asked to stop after its round: nothing sent, the run stops', async () => {
    const { s2, second, done } = await oneAMinute();
    expect(done()).toBe(false);
    await s2.stopAfterCurrentToolRound({
      sessionId: 's2',
      sessionInstanceId: s2.sessionInstanceId,
      interactionId: 'r2',
      expectedRunEpoch: 1,
      idempotencyKey: 'stop-1',
    });
    const r = await second;
    expect(r).toMatchObject({ status: 'stopped' });
    expect(r.finalMessage).toBeUndefined();
    // the scripted model's second answer was never asked for
    expect(s2.snapshot().messages.filter((m) => m.role === 'assistant')).toEqual([]);
  });

  it("pauses every session's calls of the provider for a 429's retry-after", async () => {
    const clock = clocked();
    let calls = 0;
    const model: ModelProvider = {
      modelId: 'm',
      providerName: 'p',
      call: async () => {
        if (++calls === 1)
          throw new ProviderError('429 slow down', { retryable: true, code: 'rate_limit', status: 429, retryAfterMs: 5_000 });
        return { message: { role: 'assistant', content: `answer ${calls}` }, finishReason: 'stop' };
      },
    };
    const runtime = createRuntime({ store: memoryStore(), clock, model, rateLimits: [{ provider: 'p', requestsPerMinute: 1000 }] });
    closing.push(() => runtime.close());
    const [s1, s2] = [await runtime.openSession('s1'), await runtime.openSession('s2')];
    const first = s1.execute(prompt('r1'));
    await settle();
    expect(calls).toBe(1); // refused: s1 retries after 5 s
    const waits: LiveEvent[] = [];
    s2.events$.subscribe((e) => e.event.type === 'rate_limit_wait' && waits.push(e.event));
    clock.increment(1_000);
    const second = s2.execute(prompt('r2'));
    await settle();
    expect(calls).toBe(1); // s2's call waits for the pause too
    expect(waits[0]).toMatchObject({ state: 'waiting', limit: 'p/* paused (429)' });
    clock.increment(4_000);
    expect(await first).toMatchObject({ status: 'succeeded' });
    expect(await second).toMatchObject({ status: 'succeeded' });
    expect(calls).toBe(3);
  });

  it("a call's rate-limit demand is the input estimate its budget reservation holds, with and without tools", async () => {
    const lookup = defineTool({
      name: 'lookup',
      description: 'looks a word up',
      parameters: z.strictObject({ word: z.string() }),
      execute: async ({ word }) => `${word}: a word`,
    });
    const withTools = scriptedModel([{ toolCalls: [{ name: 'lookup', arguments: { word: 'x' } }] }, 'done'], { modelId: 'm' });
    for (const [tools, model] of [
      [[lookup], withTools],
      [[], scriptedModel(['done'], { modelId: 'm' })],
    ] as const) {
      const needs: number[] = [];
      // buckets that grant every take and note what the input bucket was asked for
      const buckets: SharedBuckets = {
        ensure: async () => undefined,
        take: async (takes) => {
          for (const t of takes) if (t.key.includes('inputTokensPerMinute')) needs.push(t.need);
          return 0;
        },
        settle: async () => undefined,
      };
      const store = memoryStore();
      const runtime = createRuntime({
        store,
        model,
        tools: [...tools],
        budget: { maxOutputTokens: 10_000 },
        rateLimits: [{ inputTokensPerMinute: 1_000_000 }],
        rateLimitBuckets: buckets,
      });
      closing.push(() => runtime.close());
      const s = await runtime.openSession('s');
      expect(await s.execute(prompt('r'))).toMatchObject({ status: 'succeeded' });
      const reserved: number[] = [];
      for await (const e of store.readEvents('s'))
        if (e.type === 'assistant/message') reserved.push((e.payload as { reserved: { inputTokens: number } }).reserved.inputTokens);
      expect(reserved).toHaveLength(tools.length === 0 ? 1 : 2);
      expect(needs).toEqual(reserved);
    }
  });

  it('shared buckets that cannot be read fail the attempt, not the run: it is retried, and counts nothing (nothing was sent)', async () => {
    let takes = 0;
    // the database behind the buckets answers an error once (a dropped connection)
    const buckets: SharedBuckets = {
      ensure: async () => undefined,
      take: async () => {
        if (++takes === 1) throw new Error('connection terminated unexpectedly');
        return 0;
      },
      settle: async () => undefined,
    };
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel(['done'], { modelId: 'm' }),
      config: { retryBackoffMs: 1 },
      budget: { maxOutputTokens: 10_000 },
      rateLimits: [{ requestsPerMinute: 60 }],
      rateLimitBuckets: buckets,
    });
    closing.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect(await s.execute(prompt('r'))).toMatchObject({ status: 'succeeded', finalMessage: 'done' });
    const attempts = [];
    for await (const e of store.readEvents('s')) if (e.type === 'assistant/attempt') attempts.push(e.payload);
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({ counted: 'nothing', error: { code: 'rate_limit_backend' } });
  });

  it("a call whose rate-limit wait outlasts maxDurationMs keeps the step's failed attempts counted at their reservations", async () => {
    const clock = clocked();
    let calls = 0;
    const model: ModelProvider = {
      modelId: 'm',
      providerName: 'p',
      maxOutputTokens: 100, // each attempt reserves at most 100 output tokens
      call: async () => {
        calls++;
        throw new ProviderError('502 bad gateway', { retryable: true, code: 'server', status: 502 });
      },
    };
    const runtime = createRuntime({
      store: memoryStore(),
      clock,
      model,
      budget: { maxOutputTokens: 100_000, maxDurationMs: 10_000 },
      rateLimits: [{ provider: 'p', requestsPerMinute: 1 }],
    });
    closing.push(() => runtime.close());
    const s = await runtime.openSession('s');
    let done = false;
    const running = s.execute(prompt('r')).finally(() => (done = true));
    for (let i = 0; i < 30 && !done; i++) {
      await settle();
      clock.increment(1_000);
    }
    const r = await running;
    expect(calls).toBe(1); // the retry waited for the limit until the run's time ran out
    expect(r).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
    // the failed attempt's reservation (its output cap) is spent, never zero
    expect(r.spending?.maxOutputTokens).toMatchObject({ spent: '0', reserved: '100', remaining: '99900' });
  });
});
