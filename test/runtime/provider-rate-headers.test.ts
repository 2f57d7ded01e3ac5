import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { anthropicModel, createRuntime, memoryStore, openaiModel, type ModelProvider } from '../../src/index.js';
import type { LiveEvent } from '../../src/streams/envelopes.js';
import { an, startAnthropicServer } from '../providers/anthropic-server.js';
import { oa, startOpenAIServer } from '../providers/openai-server.js';
import type { Reply, ScriptedServer } from '../providers/sse-server.js';

const settle = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
/** Real time until `done` holds (a request over HTTP takes some). */
async function until(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!done()) throw new Error(`never: ${what}`);
}
const prompt = (runId: string) => ({
  kind: 'prompt' as const,
  runId,
  attemptId: `${runId}-a`,
  message: 'tell me something about the sea, in a few words',
});

interface Provider {
  name: 'openai' | 'anthropic';
  server: ScriptedServer;
  model(): ModelProvider;
  answer(headers: Record<string, string>): Reply;
  /** The headers of a response after which the requests limit is spent until `resetMs` from now. */
  spent(resetMs: number): Record<string, string>;
  /** The headers of a response after which `remaining` input tokens are left. */
  left(remaining: number): Record<string, string>;
}

const providers: Provider[] = [];
beforeAll(async () => {
  const openai = await startOpenAIServer();
  const anthropic = await startAnthropicServer();
  providers.push(
    {
      name: 'openai',
      server: openai,
      model: () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' }),
      answer: (headers) => ({ ...oa.textReply(['calm']), headers }) as Reply,
      spent: (ms) => ({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': `${ms / 1000}s` }),
      left: (n) => ({ 'x-ratelimit-remaining-tokens': String(n), 'x-ratelimit-reset-tokens': '1s' }),
    },
    {
      name: 'anthropic',
      server: anthropic,
      model: () => anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test' }),
      answer: (headers) => ({ ...an.textReply(['calm']), headers }) as Reply,
      spent: (ms) => ({
        'anthropic-ratelimit-requests-remaining': '0',
        'anthropic-ratelimit-requests-reset': new Date(Date.now() + ms).toISOString(),
      }),
      left: (n) => ({ 'anthropic-ratelimit-input-tokens-remaining': String(n) }),
    },
  );
});
afterAll(async () => {
  for (const p of providers) await p.server.close();
});
const closing: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closing.splice(0)) await c();
  for (const p of providers) p.server.reset();
});

/** A runtime on the simulated clock whose first session's call is answered with `headers`; then a second session calls. */
async function afterFirstCall(p: Provider, limit: object, headers: Record<string, string>) {
  const clock = new SimulatedClock();
  clock.set(Date.now());
  const runtime = createRuntime({ store: memoryStore(), clock, model: p.model(), rateLimits: [{ provider: p.name, ...limit }] });
  closing.push(() => runtime.close());
  p.server.reply(p.answer(headers), p.answer({}));
  const s1 = await runtime.openSession('s1');
  expect(await s1.execute(prompt('r1'))).toMatchObject({ status: 'succeeded' });
  const s2 = await runtime.openSession('s2');
  const waits: LiveEvent[] = [];
  s2.events$.subscribe((e) => e.event.type === 'rate_limit_wait' && waits.push(e.event));
  let done = false;
  const second = s2.execute(prompt('r2')).finally(() => (done = true));
  await until(() => waits.length > 0 || done, 'the second call waits or is made');
  return { clock, waits, second, done: () => done };
}

describe.each(['openai', 'anthropic'])("the limiter reads %s's rate headers", (name) => {
  const provider = () => providers.find((p) => p.name === name)!;

  it('holds the calls of the provider until the reset of a limit its response says is spent', async () => {
    const p = provider();
    const { clock, waits, second, done } = await afterFirstCall(p, { requestsPerMinute: 1000 }, p.spent(30_000));
    expect(waits[0]).toMatchObject({ state: 'waiting', limit: `${name}/* paused (provider limit spent)` });
    clock.increment(25_000);
    await settle();
    expect(done()).toBe(false);
    expect(p.server.requests).toHaveLength(1);
    clock.increment(5_000);
    expect(await second).toMatchObject({ status: 'succeeded' });
    expect(p.server.requests).toHaveLength(2);
  });

  it('lowers a bucket to what the provider says is left', async () => {
    const p = provider();
    // 100 000 input tokens a minute: plenty for two calls, but the provider says 3 are left
    const { clock, waits, second, done } = await afterFirstCall(p, { inputTokensPerMinute: 100_000 }, p.left(3));
    expect(waits[0]).toMatchObject({ state: 'waiting', limit: `${name}/* inputTokensPerMinute` });
    expect(done()).toBe(false);
    expect(p.server.requests).toHaveLength(1);
    clock.increment(1_000); // refilled meanwhile at the limit's own rate
    expect(await second).toMatchObject({ status: 'succeeded' });
    expect(p.server.requests).toHaveLength(2);
  });

  it('lets the next call go at once when the headers leave room', async () => {
    const p = provider();
    const { waits, second } = await afterFirstCall(p, { inputTokensPerMinute: 100_000 }, p.left(50_000));
    expect(await second).toMatchObject({ status: 'succeeded' });
    expect(waits).toEqual([]);
  });
});
