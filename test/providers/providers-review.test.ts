import { getEventListeners } from 'node:events';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, type ModelProvider, type RuntimeOptions } from '../../src/index.js';
import { isCancelledError } from '../../src/contracts/errors.js';
import type { ModelStreamEvent } from '../../src/contracts/model.js';
import { openaiModel } from '../../src/providers/openai.js';
import { oa, startOpenAIServer } from './openai-server.js';
import { callModel, failureOf, type ScriptedServer } from './sse-server.js';

/**
 * Review of the provider adapters' edge paths, with the real `openai` SDK client against the
 * local Chat Completions wire-format server. Every test here documents a defect (it fails
 * against the current source).
 */

let server: ScriptedServer;
beforeAll(async () => void (server = await startOpenAIServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());

// SDK default retries stay on in the client: only the adapter's per-request maxRetries: 0 applies.
const gpt = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL, logLevel: 'off' }), model: 'gpt-test' });

let n = 0;
const ids = () => {
  n++;
  return { runId: `review-run-${n}`, attemptId: `review-att-${n}` };
};

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const r of open.splice(0)) await r.close();
});

/** A runtime on a fresh memory store. */
function runtimeWith(model: ModelProvider, extra: Partial<Omit<RuntimeOptions, 'store' | 'model'>> = {}) {
  const store = memoryStore();
  const runtime = createRuntime({ model, store, tools: [], ...extra });
  open.push(runtime);
  return { runtime, store };
}

async function readLog(store: ReturnType<typeof memoryStore>, sessionId: string) {
  const out: { type: string; payload: any }[] = [];
  for await (const e of store.readEvents(sessionId) as AsyncIterable<{ type: string; payload: any }>) out.push(e);
  return out;
}

/** OpenAI's 429 body when the account has no credit left (https://platform.openai.com/docs/guides/error-codes). */
const quotaExceeded = () => ({
  kind: 'status' as const,
  status: 429,
  body: {
    error: {
      message: 'You exceeded your current quota, please check your plan and billing details.',
      type: 'insufficient_quota',
      param: null,
      code: 'insufficient_quota',
    },
  },
});

describe('providers review: openaiModel error classification', () => {
  // OpenAI documents this 429 as "You have run out of credits or hit your maximum monthly spend —
  // buy more credits": waiting does not fix it. The adapter already knows that: the same error
  // inside a stream (classifyStreamErrorType) is `permission`, not retryable. Over HTTP it is
  // classified by status alone, so the runtime retries it maxProviderAttempts times (each a
  // logged rate_limit attempt) before the run fails.
  it('an HTTP 429 insufficient_quota is a non-retryable ProviderError, like the same error inside a stream', async () => {
    server.reply(quotaExceeded());
    const http = await failureOf(callModel(gpt()).response);

    server.reply(oa.stream([oa.role(), { error: quotaExceeded().body.error }]));
    const inStream = await failureOf(callModel(gpt()).response);
    expect(inStream).toMatchObject({ name: 'ProviderError', retryable: false, providerCode: 'permission' });

    expect(http).toMatchObject({ name: 'ProviderError', status: 429, retryable: false });
  });

  it('a run whose OpenAI account is out of quota fails after one request, not maxProviderAttempts', async () => {
    server.reply(quotaExceeded(), quotaExceeded(), quotaExceeded());
    const { runtime, store } = runtimeWith(gpt(), { config: { retryBackoffMs: 1 } });
    const s = await runtime.openSession('quota');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ status: 'failed', error: { kind: 'execution' } });
    const attempts = (await readLog(store, 'quota')).filter((e) => e.type === 'assistant/attempt');
    expect(attempts.map((a) => a.payload.error.retryable)).toEqual([false]);
    expect(server.requests).toHaveLength(1);
  });
});

describe('providers review: abort listeners and deltas after an abort', () => {
  // The openai SDK adds one `{ once: true }` abort listener to the request's signal per HTTP
  // request and never removes it. docs/architecture.md: "the model step reuses its controller
  // while the provider left no listener on it" — but all retries of one step share that step's
  // signal, so every failed attempt leaves one more listener on it (0, 1, 2, … seen at each
  // attempt). With maxProviderAttempts ≥ 11 (or fewer, when a compaction's summary call retried
  // on the same signal first) Node warns of an EventTarget memory leak.
  it('retries within one model step leave no SDK abort listeners piling up on the step signal', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 11; i++) server.reply(oa.error(500, 'The server had an error', 'server_error'));
      server.reply(oa.textReply(['ok']));
      const inner = gpt();
      const seen: number[] = [];
      const model: ModelProvider = {
        modelId: inner.modelId,
        call: (req, on) => {
          seen.push(getEventListeners(req.signal, 'abort').length);
          return inner.call(req, on);
        },
      };
      const { runtime } = runtimeWith(model, { config: { maxProviderAttempts: 12, retryBackoffMs: 0 } });
      const s = await runtime.openSession('listeners');
      const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
      expect(r.status).toBe('succeeded');
      expect(server.requests).toHaveLength(12);
      await new Promise((resolve) => setTimeout(resolve, 20)); // warnings are emitted on a later tick
      expect(seen.every((c) => c === seen[0])).toBe(true); // each attempt starts with the listeners the first had
      expect(warnings.filter((w) => w.includes('MaxListenersExceeded'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  // docs/providers.md: "Once the request's signal aborts, no further delta reaches onEvent."
  // The adapter checks the signal once per chunk, but one chunk can carry several deltas
  // (several tool_calls entries, as compatible servers that stream each call whole send them).
  it('delivers no delta after the signal aborted inside an earlier delta of the same chunk', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.delta({
          tool_calls: [
            { index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { index: 1, id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
          ],
        }),
        oa.finish('tool_calls'),
        oa.usage(3, 3),
      ]),
    );
    const ac = new AbortController();
    const seen: ModelStreamEvent[] = [];
    const error = await failureOf(
      gpt().call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: ac.signal }, (e) => {
        seen.push(e);
        ac.abort();
      }),
    );
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toHaveLength(1);
  });
});

describe('providers review: OpenAI audio output', () => {
  // With `extraBody: { modalities: ['text', 'audio'], audio: {...} }` the Chat Completions stream
  // carries the answer's text in `delta.audio.transcript` and `content` is null. The adapter
  // ignores `delta.audio`, so the response is an empty message with finish 'stop' and the run
  // delivers '' as a succeeded final answer — DESIGN.md: "no final answer silently lost";
  // docs/providers.md fails an answer the content filter removed "instead of delivering an empty
  // final answer". Either the transcript is the answer, or the call fails, named.
  it('an answer streamed as audio (transcript only) is not delivered as an empty succeeded final answer', async () => {
    server.reply(
      oa.stream([
        oa.delta({ role: 'assistant', content: null, refusal: null, audio: { id: 'audio_abc', transcript: 'Hel', data: 'UklGRg==', expires_at: 1_700_003_600 } }),
        oa.delta({ audio: { transcript: 'lo.', data: 'AAAA' } }),
        oa.finish('stop'),
        oa.usage(12, 30),
      ]),
    );
    const delivered: string[] = [];
    const model = openaiModel({
      client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL, logLevel: 'off' }),
      model: 'gpt-4o-audio-preview',
      extraBody: { modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'pcm16' } },
    });
    const { runtime } = runtimeWith(model, { delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s = await runtime.openSession('audio');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'Say hello' });
    expect(server.lastBody()).toMatchObject({ modalities: ['text', 'audio'] });
    expect(delivered).not.toEqual(['']);
    expect(r.status === 'succeeded' && r.finalMessage === '').toBe(false);
  });
});
