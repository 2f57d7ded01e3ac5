import { getEventListeners } from 'node:events';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isProviderError, type Envelope, type ModelProvider, type RuntimeOptions } from '../../src/index.js';
import { openaiModel } from '../../src/providers/openai.js';
import { ids, lmdbRuntime, logOf, memRuntime, typesOf } from '../helpers/runtime.js';
import { oa, quotaExceeded, startOpenAIServer } from './openai-server.js';
import { type ScriptedServer } from './sse-server.js';
import { deltas, expectDiscardedThenRetried } from './stream-envelopes.js';

/**
 * Whole runs through `session.execute` with the real `openai` SDK client against the local
 * Chat Completions wire-format server: the engine's surface messages → adapter → HTTP body, and
 * the streamed chunks → adapter → log / live envelopes.
 */

let server: ScriptedServer;
beforeAll(async () => void (server = await startOpenAIServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());

const SYSTEM = 'You are a terse weather bot.';

/** A client with the SDK's default retries: only the adapter's per-request `maxRetries: 0` applies. */
const model = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' });

/** The weather tool; every `execute` call's parsed arguments are recorded. */
function weatherTool() {
  const calls: unknown[] = [];
  const tool = defineTool({
    name: 'get_weather',
    description: 'Current weather in a city',
    mode: 'parallel',
    parameters: z.object({ city: z.string().describe('City name'), days: z.number().int().optional() }),
    execute: (args) => {
      calls.push(args);
      return `sunny in ${args.city}`;
    },
  });
  return { tool, calls };
}

function setup(extra: Partial<Omit<RuntimeOptions, 'store' | 'model'>> = {}) {
  const { tool, calls } = weatherTool();
  const { runtime, store } = lmdbRuntime({ model: model(), tools: [tool], systemPrompt: SYSTEM, ...extra });
  return { runtime, store, calls };
}

/** Opens a session and records every envelope it publishes. */
async function openRecorded(runtime: ReturnType<typeof setup>['runtime'], id = 's') {
  const session = await runtime.openSession(id);
  const envelopes: Envelope[] = [];
  session.events$.subscribe((e) => envelopes.push(e));
  return { session, envelopes };
}

/** The JSON Schema `defineTool` derives from the zod parameters, as the server must receive it. */
const expectedTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: expect.objectContaining({
      type: 'object',
      properties: { city: { type: 'string', description: 'City name' }, days: expect.objectContaining({ type: 'integer' }) },
      required: ['city'],
    }),
  },
};

describe('openaiModel in a full run (real SDK, local server)', () => {
  it('tool call, then a streamed final answer: result, tool args, live deltas, log and the second request body', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '', { id: 'call_abc', name: 'get_weather' }),
        oa.tool(0, '{"ci'),
        oa.tool(0, 'ty": "Paris"}'),
        oa.finish('tool_calls'),
        oa.usage(40, 12),
      ]),
      oa.textReply(['It is ', 'sunny in ', 'Paris.'], 'stop', [60, 7, 10]),
    );
    const { runtime, store, calls } = setup();
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Weather in Paris?' });

    expect(r).toMatchObject({ status: 'succeeded', outcome: 'completed', finalMessage: 'It is sunny in Paris.', steps: 2 });
    expect(r.usage).toMatchObject({ inputTokens: 100, outputTokens: 19 });
    expect(calls).toEqual([{ city: 'Paris' }]);

    // live text deltas, one envelope per streamed chunk, in order
    expect(deltas(envelopes)).toEqual(['It is ', 'sunny in ', 'Paris.']);
    const final = envelopes.find((e) => e.event.type === 'execution_finished')!;
    expect(envelopes.indexOf(final)).toBeGreaterThan(envelopes.findIndex((e) => e.event.type === 'message_delta'));

    // the log
    const log = await logOf(store, 's');
    const types = typesOf(log);
    expect(types.indexOf('tool/call')).toBeGreaterThan(-1);
    expect(types.indexOf('tool/call')).toBeLessThan(types.indexOf('tool/result'));
    const call = log.find((e) => e.type === 'tool/call')!;
    expect(call.payload).toMatchObject({ callId: 'call_abc', name: 'get_weather', arguments: { city: 'Paris' } });
    const result = log.find((e) => e.type === 'tool/result')!;
    expect(result.payload).toMatchObject({ callId: 'call_abc', outcome: { kind: 'completed', content: 'sunny in Paris' } });
    const assistants = log.filter((e) => e.type === 'assistant/message').map((e) => e.payload);
    expect(assistants).toMatchObject([
      {
        message: { role: 'assistant', content: '', toolCalls: [{ id: 'call_abc', name: 'get_weather', arguments: '{"city": "Paris"}' }] },
        usage: { inputTokens: 40, outputTokens: 12, cachedInputTokens: 0 },
        finishReason: 'tool_calls',
      },
      {
        message: { role: 'assistant', content: 'It is sunny in Paris.' },
        usage: { inputTokens: 60, outputTokens: 7, cachedInputTokens: 10 },
        finishReason: 'stop',
      },
    ]);
    expect(types.filter((t) => t === 'assistant/attempt')).toEqual([]);

    // the requests
    expect(server.requests).toHaveLength(2);
    for (const req of server.requests) {
      expect(req.path).toBe('/v1/chat/completions');
      expect(req.body).toMatchObject({ model: 'gpt-test', stream: true, stream_options: { include_usage: true } });
      expect(req.body.tools).toEqual([expectedTool]);
    }
    expect(server.requests[0]!.body.messages).toEqual([
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'Weather in Paris?' },
    ]);
    expect(server.requests[1]!.body.messages).toEqual([
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: 'sunny in Paris' },
    ]);
  });

  it('two parallel tool calls interleaved in one response: both run, each result pairs with its call id', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '', { id: 'call_a', name: 'get_weather' }),
        oa.tool(1, '', { id: 'call_b', name: 'get_weather' }),
        oa.tool(0, '{"city":'),
        oa.tool(1, '{"city":"Ro'),
        oa.tool(0, '"Paris","days":2}'),
        oa.tool(1, 'me"}'),
        oa.finish('tool_calls'),
        oa.usage(40, 20),
      ]),
      oa.textReply(['Sunny ', 'in both.']),
    );
    const { runtime, store, calls } = setup();
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Paris and Rome?' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny in both.' });
    expect(calls).toHaveLength(2);
    expect(calls).toEqual(expect.arrayContaining([{ city: 'Paris', days: 2 }, { city: 'Rome' }]));
    expect(deltas(envelopes).join('')).toBe('Sunny in both.');

    const log = await logOf(store, 's');
    const callRecs = log.filter((e) => e.type === 'tool/call');
    const resultRecs = log.filter((e) => e.type === 'tool/result');
    expect(callRecs.map((e) => e.payload.callId)).toEqual(['call_a', 'call_b']);
    expect(Math.max(...callRecs.map((e) => e.seq))).toBeLessThan(Math.min(...resultRecs.map((e) => e.seq)));
    expect(Object.fromEntries(resultRecs.map((e) => [e.payload.callId, (e.payload.outcome as { content: string }).content]))).toEqual({
      call_a: 'sunny in Paris',
      call_b: 'sunny in Rome',
    });
    expect(log.find((e) => e.type === 'assistant/message')!.payload.usage).toMatchObject({ inputTokens: 40, outputTokens: 20 });

    expect(server.requests).toHaveLength(2);
    const msgs = server.requests[1]!.body.messages as any[];
    expect(msgs[0]).toEqual({ role: 'system', content: SYSTEM });
    expect(msgs[2]).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":2}' } },
        { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
      ],
    });
    const toolMsgs = msgs.slice(3);
    expect(toolMsgs).toHaveLength(2);
    expect(toolMsgs).toEqual(
      expect.arrayContaining([
        { role: 'tool', tool_call_id: 'call_a', content: 'sunny in Paris' },
        { role: 'tool', tool_call_id: 'call_b', content: 'sunny in Rome' },
      ]),
    );
  });

  it('429 with retry-after: 0 once: one retryable assistant/attempt, two requests in all, then success', async () => {
    server.reply(oa.error(429, 'Rate limit reached', 'requests', { 'retry-after': '0' }), oa.textReply(['Hello', ' again.']));
    const { runtime, store } = setup({ config: { retryBackoffMs: 1 } });
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Hello again.' });
    expect(server.requests).toHaveLength(2); // the SDK did not retry on its own
    expect(server.requests[1]!.body).toEqual(server.requests[0]!.body);
    const log = await logOf(store, 's');
    const attempts = log.filter((e) => e.type === 'assistant/attempt');
    expect(attempts).toHaveLength(1);
    expect(attempts[0]!.payload).toMatchObject({ attemptNumber: 1, error: { retryable: true, code: 'rate_limit', partialOutput: false } });
    expect(log.filter((e) => e.type === 'assistant/message')).toHaveLength(1);
    expect(deltas(envelopes)).toEqual(['Hello', ' again.']);
  });

  it('a stream broken after output began is retried: partialOutput attempt logged, the retried stream starts a new message', async () => {
    server.reply(
      oa.stream([oa.role(), oa.text('Hel'), oa.text('lo'), oa.finish('stop'), oa.usage(5, 5)], { cutAfter: 2 }),
      oa.textReply(['Hello', ' world.']),
    );
    const { runtime, store } = setup({ config: { retryBackoffMs: 1 } });
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Hello world.' });
    expect(server.requests).toHaveLength(2);
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'assistant/attempt').map((e) => e.payload)).toMatchObject([
      { attemptNumber: 1, error: { retryable: true, code: 'stream_interrupted', partialOutput: true } },
    ]);
    expect(log.filter((e) => e.type === 'assistant/message').map((e) => (e.payload.message as { content: string }).content)).toEqual([
      'Hello world.',
    ]);
    // The broken attempt's deltas were already published; its message_end says they are
    // discarded, then the retry opens a new message_start with exactly the logged message.
    expectDiscardedThenRetried(envelopes, ['Hel'], ['Hello', ' world.']);
  });

  it('500 three times with maxProviderAttempts 3: failed with a ProviderError, three attempts, three requests', async () => {
    const err = () => oa.error(500, 'The server had an error', 'server_error');
    server.reply(err(), err(), err());
    const { runtime, store } = setup({ config: { retryBackoffMs: 1, maxProviderAttempts: 3 } });
    const session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });

    expect(r).toMatchObject({ status: 'failed', outcome: 'failed', error: { kind: 'execution' } });
    expect(isProviderError(r.error!.cause)).toBe(true);
    expect(r.error!.cause).toMatchObject({ retryable: true, providerCode: 'server', status: 500 });
    expect(server.requests).toHaveLength(3);
    const log = await logOf(store, 's');
    const attempts = log.filter((e) => e.type === 'assistant/attempt');
    expect(attempts.map((a) => a.payload)).toMatchObject([
      { attemptNumber: 1, error: { retryable: true, code: 'server' } },
      { attemptNumber: 2, error: { retryable: true, code: 'server' } },
      { attemptNumber: 3, error: { retryable: true, code: 'server' } },
    ]);
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['failed']);
  });
});

/**
 * Engine ↔ Chat Completions mapping bugs. The local server accepts any body; the real API answers
 * 400 to both shapes below (every `tool_calls[].id` needs a `role: 'tool'` reply, and the tool
 * replies must directly follow the assistant message), so the run would fail there with a
 * non-retryable `ProviderError { code: 'bad_request' }`.
 */
describe('openaiModel in a long run', () => {
  // The SDK adds an abort listener to the request's signal for every call and never removes it:
  // a signal shared by the steps of a run would collect one per step (MaxListenersExceededWarning
  // after 10). Each model step has a signal of its own.
  it('13 model calls in one run leave no abort listeners behind (no MaxListenersExceededWarning)', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 12; i++) {
        server.reply(
          oa.stream([
            oa.role(),
            oa.tool(0, '{"city":"Paris"}', { id: `call_${i}`, name: 'get_weather' }),
            oa.finish('tool_calls'),
            oa.usage(1, 1),
          ]),
        );
      }
      server.reply(oa.textReply(['done']));
      const { runtime } = setup();
      const session = await runtime.openSession('s');
      const r = await session.execute({ kind: 'prompt', ...ids(), message: 'weather, twelve times' });
      expect(r).toMatchObject({ status: 'succeeded', steps: 13 });
      await new Promise((resolve) => setTimeout(resolve, 20)); // warnings are emitted on a later tick
      expect(warnings.filter((w) => w.includes('MaxListenersExceeded'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('openaiModel in a full run: every tool call gets its tool message', () => {
  /** Ids of the assistant's tool_calls, and of the tool messages that directly follow it. */
  function pairing(messages: any[]) {
    const i = messages.findIndex((m) => m.role === 'assistant' && m.tool_calls);
    const calls = (messages[i].tool_calls as { id: string }[]).map((c) => c.id);
    const following: string[] = [];
    for (const m of messages.slice(i + 1)) {
      if (m.role !== 'tool') break;
      following.push(m.tool_call_id);
    }
    return { calls, following, after: messages.slice(i + 1).map((m) => m.role) };
  }

  // A rejected batch answers every call of the message: the bad ones with their error, the
  // valid ones as not run (the providers refuse a request with an unanswered tool call).
  it('a rejected batch with one valid and one unknown call answers every tool_call id', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '{"city":"Paris"}', { id: 'call_a', name: 'get_weather' }),
        oa.tool(1, '{}', { id: 'call_b', name: 'get_forecast' }),
        oa.finish('tool_calls'),
        oa.usage(10, 10),
      ]),
      oa.textReply(['ok']),
    );
    const { runtime, store, calls } = setup();
    const session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r.status).toBe('succeeded'); // only because the local server does not validate
    expect(calls).toEqual([]); // no call of a rejected batch runs
    const rejected = (await logOf(store, 's')).find((e) => e.type === 'tool/batch-rejected')!;
    expect((rejected.payload.issues as { callId: string }[]).map((i) => i.callId)).toEqual(['call_a', 'call_b']);

    const { calls: callIds, following } = pairing(server.requests[1]!.body.messages);
    expect(callIds).toEqual(['call_a', 'call_b']);
    expect([...following].sort()).toEqual(['call_a', 'call_b']);
  });

  // Chat Completions needs the tool messages contiguous right after the assistant message: all
  // tool results are staged before any additional or verifier message.
  it("a tool result's additionalMessages do not split the tool messages of a parallel batch", async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '{"city":"Paris"}', { id: 'call_a', name: 'get_weather' }),
        oa.tool(1, '{"city":"Rome"}', { id: 'call_b', name: 'get_weather' }),
        oa.finish('tool_calls'),
        oa.usage(10, 10),
      ]),
      oa.textReply(['ok']),
    );
    const tool = defineTool({
      name: 'get_weather',
      description: 'Current weather in a city',
      mode: 'parallel',
      parameters: z.object({ city: z.string() }),
      execute: ({ city }) =>
        city === 'Paris'
          ? {
              kind: 'completed' as const,
              content: 'sunny in Paris',
              additionalMessages: [{ role: 'user' as const, content: 'Note: the Paris data is an hour old.' }],
            }
          : `sunny in ${city}`,
    });
    const { runtime } = lmdbRuntime({ model: model(), tools: [tool], systemPrompt: SYSTEM });
    const session = await runtime.openSession('s');
    expect((await session.execute({ kind: 'prompt', ...ids(), message: 'hi' })).status).toBe('succeeded');

    const { following, after } = pairing(server.requests[1]!.body.messages);
    expect(after).toEqual(['tool', 'tool', 'user']); // actual: ['tool', 'user', 'tool']
    expect(following).toEqual(['call_a', 'call_b']);
  });
});

describe('openaiModel in a run: caps, refusals and filtered answers', () => {
  it("caps each model call's output at the run's maxOutputTokens budget (docs/providers.md: run cap)", async () => {
    server.reply(oa.textReply(['ok']));
    const { runtime } = lmdbRuntime({ model: model(), tools: [], budget: { maxOutputTokens: 50 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(server.requests).toHaveLength(1);
    // the adapter lowers its cap to request.maxOutputTokens, but the runtime never sets it
    expect(server.requests[0]!.body.max_completion_tokens).toBeLessThanOrEqual(50);
  });

  it('an OpenAI refusal is the final answer: the refusal text reaches the result', async () => {
    server.reply(oa.stream([oa.role(), oa.delta({ refusal: "I can't help with that." }), oa.finish('stop'), oa.usage(9, 4)]));
    const { runtime } = lmdbRuntime({ model: model(), tools: [] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    // the refusal is the model's answer: it becomes the final answer (the log keeps finishReason 'refusal')
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: "I can't help with that." });
  });

  it("an answer the provider's content filter removed entirely fails the run, named (no empty final is delivered)", async () => {
    server.reply(oa.stream([oa.role(), oa.finish('content_filter'), oa.usage(9, 0)]));
    const delivered: string[] = [];
    const { runtime } = lmdbRuntime({ model: model(), tools: [], delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ status: 'failed', error: { kind: 'execution' } });
    expect(r.error!.message).toMatch(/content filter/);
    expect(r.usage).toMatchObject({ inputTokens: 9, outputTokens: 0 });
    expect(delivered).toEqual([]);
  });

  // With `extraBody: { modalities: ['text', 'audio'], audio: {...} }` the Chat Completions stream
  // carries the answer's text in `delta.audio.transcript` and `content` is null. The adapter
  // ignores `delta.audio`, so the response is an empty message with finish 'stop' and the run
  // delivers '' as a succeeded final answer — DESIGN.md: "no final answer silently lost";
  // docs/providers.md fails an answer the content filter removed "instead of delivering an empty
  // final answer". Either the transcript is the answer, or the call fails, named.
  it('an answer streamed as audio (transcript only) is never delivered as an empty succeeded final answer', async () => {
    server.reply(
      oa.stream([
        oa.delta({
          role: 'assistant',
          content: null,
          refusal: null,
          audio: { id: 'audio_abc', transcript: 'Hel', data: 'UklGRg==', expires_at: 1_700_003_600 },
        }),
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
    const { runtime } = memRuntime({ model, tools: [], delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s = await runtime.openSession('audio');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'Say hello' });
    expect(server.lastBody()).toMatchObject({ modalities: ['text', 'audio'] });
    expect(delivered).not.toEqual(['']);
    expect(r.status === 'succeeded' && r.finalMessage === '').toBe(false);
  });
});

describe('openaiModel in a run: retries', () => {
  it('a run whose OpenAI account is out of quota fails after one request, not maxProviderAttempts', async () => {
    server.reply(quotaExceeded(), quotaExceeded(), quotaExceeded());
    const { runtime, store } = memRuntime({ model: model(), tools: [], config: { retryBackoffMs: 1 } });
    const s = await runtime.openSession('quota');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ status: 'failed', error: { kind: 'execution' } });
    const attempts = (await logOf(store, 'quota')).filter((e) => e.type === 'assistant/attempt');
    expect(attempts.map((a) => (a.payload.error as { retryable: boolean }).retryable)).toEqual([false]);
    expect(server.requests).toHaveLength(1);
  });

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
      const inner = model();
      const seen: number[] = [];
      const watched: ModelProvider = {
        modelId: inner.modelId,
        call: (req, on) => {
          seen.push(getEventListeners(req.signal, 'abort').length);
          return inner.call(req, on);
        },
      };
      const { runtime } = memRuntime({ model: watched, tools: [], config: { maxProviderAttempts: 12, retryBackoffMs: 0 } });
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
});
