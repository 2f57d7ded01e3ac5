import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { isCancelledError, isProviderError, isValidationError } from '../../src/contracts/errors.js';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ModelStreamEvent } from '../../src/contracts/model.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import { openaiModel, openaiModelFromEnv, type OpenAIModelOptions } from '../../src/providers/openai.js';
import { memRuntime } from '../helpers/runtime.js';
import { oa, quotaExceeded, startOpenAIServer } from './openai-server.js';
import { abortOnFirstDelta, callModel, closedPort, failureOf, type ScriptedServer } from './sse-server.js';

let server: ScriptedServer;
beforeAll(async () => void (server = await startOpenAIServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());
afterEach(() => vi.unstubAllEnvs());

// A client with the SDK's default retries (2): only the per-request `maxRetries: 0` keeps it at one request.
const client = (opts: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) =>
  new OpenAI({ apiKey: 'test', baseURL: server.baseURL, ...opts });
const model = (opts: Partial<OpenAIModelOptions> = {}) => openaiModel({ client: client(), model: 'gpt-test', ...opts });

const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
};

describe('openaiModel request', () => {
  it('maps system, user, assistant tool calls and tool results, tools, caps and extra body', async () => {
    const history: Message[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris and Rome?', name: 'ann' },
      {
        role: 'assistant',
        content: '',
        toolCalls: [
          { id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { id: 'call_2', name: 'get_weather', arguments: '{"city":"Rome"}' },
        ],
      },
      { role: 'tool', toolCallId: 'call_1', name: 'get_weather', content: 'sunny' },
      { role: 'tool', toolCallId: 'call_2', name: 'get_weather', content: 'rain' },
    ];
    server.reply(oa.textReply(['ok']));
    const m = model({ temperature: 0.2, maxTokens: 500, extraBody: { parallel_tool_calls: true, seed: 7 } });
    await callModel(m, { messages: history, tools: [weather], maxOutputTokens: 300 }).response;

    expect(server.requests).toHaveLength(1);
    const req = server.requests[0];
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.headers.authorization).toBe('Bearer test');
    expect(req.body).toMatchObject({
      model: 'gpt-test',
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      max_completion_tokens: 300,
      parallel_tool_calls: true,
      seed: 7,
    });
    expect(req.body.tools).toEqual([
      { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city', parameters: weather.parameters } },
    ]);
    expect(req.body.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris and Rome?', name: 'ann' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'tool', tool_call_id: 'call_2', content: 'rain' },
    ]);
  });

  it('uses the developer role and max_tokens when asked, and sends no empty tools list', async () => {
    server.reply(oa.textReply(['ok']));
    const m = model({ systemRole: 'developer', maxTokensParam: 'max_tokens', maxTokens: 500 });
    await callModel(m, {
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'U' },
      ],
    }).response;
    const body = server.lastBody();
    expect(body.messages[0]).toEqual({ role: 'developer', content: 'S' });
    expect(body.max_tokens).toBe(500);
    expect(body).not.toHaveProperty('max_completion_tokens');
    expect(body).not.toHaveProperty('tools');
  });
});

describe('openaiModel stream', () => {
  it('streams text deltas and maps usage with cached and reasoning tokens', async () => {
    server.reply(oa.textReply(['Hel', 'lo', ' world'], 'stop', [120, 7, 64, 5]));
    const { events, response } = callModel(model());
    const res = await response;
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
      { type: 'text_delta', text: ' world' },
    ]);
    expect(res.message.content).toBe('Hello world');
    expect(res.message.toolCalls).toBeUndefined();
    expect(res.finishReason).toBe('stop');
    expect(res.usage).toEqual({ inputTokens: 120, outputTokens: 7, cachedInputTokens: 64, reasoningTokens: 5 });
    expect(res.message.providerData).toEqual({ openai: { id: 'chatcmpl-test1', model: 'gpt-test', finishReason: 'stop' } });
  });

  it('assembles interleaved parallel tool calls by index, keeping the raw argument text', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '', { id: 'call_a', name: 'get_weather' }),
        oa.tool(1, '', { id: 'call_b', name: 'get_time' }),
        oa.tool(0, '{"city":'),
        oa.tool(1, '{"tz": "Europe/'),
        oa.tool(0, '"Paris"}'),
        oa.tool(1, 'Rome"}'),
        oa.finish('tool_calls'),
        oa.usage(50, 30),
      ]),
    );
    const { events, response } = callModel(model(), { tools: [weather] });
    const res = await response;
    expect(res.finishReason).toBe('tool_calls');
    expect(res.message.toolCalls).toEqual([
      { id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'call_b', name: 'get_time', arguments: '{"tz": "Europe/Rome"}' },
    ]);
    expect(events.map((e) => (e.type === 'toolcall_delta' ? e.index : -1))).toEqual([0, 1, 0, 1, 0, 1]);
    expect(events[0]).toEqual({ type: 'toolcall_delta', index: 0, callId: 'call_a', name: 'get_weather', argumentsDelta: '' });
    expect(events[3]).toEqual({ type: 'toolcall_delta', index: 1, argumentsDelta: '{"tz": "Europe/' });
  });

  it('does not validate arguments: a call cut by length keeps its broken JSON', async () => {
    server.reply(oa.stream([oa.tool(0, '{"city": "Par', { id: 'call_x', name: 'get_weather' }), oa.finish('length'), oa.usage(5, 100)]));
    const res = await callModel(model()).response;
    expect(res.finishReason).toBe('length');
    expect(res.message.toolCalls).toEqual([{ id: 'call_x', name: 'get_weather', arguments: '{"city": "Par' }]);
  });

  it.each([
    ['stop', 'stop'],
    ['length', 'length'],
    ['content_filter', 'content_filter'],
    ['function_call', 'tool_calls'],
  ])('maps finish_reason %s to %s', async (raw, mapped) => {
    server.reply(oa.textReply(['x'], raw));
    expect((await callModel(model()).response).finishReason).toBe(mapped);
  });

  it('maps a refusal, keeps it in providerData and sends it back on replay', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        oa.delta({ refusal: "I can't" }),
        oa.delta({ refusal: ' help with that.' }),
        oa.finish('stop'),
        oa.usage(9, 4),
      ]),
    );
    const res = await callModel(model()).response;
    expect(res.finishReason).toBe('refusal');
    expect(res.refusal).toBe("I can't help with that.");
    expect(res.message.content).toBe('');
    expect(res.message.providerData?.openai).toMatchObject({ refusal: "I can't help with that." });

    server.reply(oa.textReply(['ok']));
    await callModel(model(), { messages: [{ role: 'user', content: 'hi' }, res.message, { role: 'user', content: 'please' }] }).response;
    expect(server.lastBody().messages[1]).toEqual({ role: 'assistant', content: null, refusal: "I can't help with that." });
  });

  it('streams reasoning of compatible servers as thinking deltas and gives ids to calls without one', async () => {
    server.reply(
      oa.stream([
        oa.delta({ role: 'assistant', reasoning_content: 'Think' }),
        oa.delta({ reasoning_content: 'ing.' }),
        oa.delta({ tool_calls: [{ index: 0, function: { name: 'get_weather', arguments: '{}' } }] }),
        oa.finish('tool_calls'),
      ]),
    );
    const { events, response } = callModel(model());
    const res = await response;
    expect(events.slice(0, 2)).toEqual([
      { type: 'thinking_delta', text: 'Think' },
      { type: 'thinking_delta', text: 'ing.' },
    ]);
    expect(res.message.providerData?.openai).toMatchObject({ reasoning: 'Thinking.' });
    expect(res.message.toolCalls?.[0].id).toMatch(/^call_/);
    expect(res.usage).toBeUndefined();
  });
});

describe('openaiModel errors', () => {
  it('turns one 429 into one request and a retryable ProviderError with retry-after', async () => {
    server.reply(oa.error(429, 'Rate limit reached', 'requests', { 'retry-after': '2' }));
    const e = await failureOf(callModel(model()).response);
    expect(server.requests).toHaveLength(1);
    expect(isProviderError(e)).toBe(true);
    expect(e).toMatchObject({ retryable: true, providerCode: 'rate_limit', status: 429, retryAfterMs: 2000, partialOutput: false });
  });

  it('reads retry-after-ms before retry-after, and HTTP dates', async () => {
    server.reply(oa.error(429, 'slow', 'requests', { 'retry-after-ms': '1500', 'retry-after': '9' }));
    expect(await failureOf(callModel(model()).response)).toMatchObject({ retryAfterMs: 1500 });
    server.reply(oa.error(503, 'busy', 'server_error', { 'retry-after': new Date(Date.now() + 30_000).toUTCString() }));
    const e = await failureOf(callModel(model()).response);
    expect(e.retryAfterMs).toBeGreaterThan(25_000);
    expect(e.retryAfterMs).toBeLessThanOrEqual(30_000);
  });

  it.each([
    [500, true, 'server'],
    [503, true, 'server'],
    [529, true, 'overloaded'],
    [408, true, 'timeout'],
    [409, true, 'conflict'],
    [400, false, 'bad_request'],
    [401, false, 'auth'],
    [403, false, 'permission'],
    [404, false, 'not_found'],
    [422, false, 'unprocessable'],
  ])('maps HTTP %i to retryable=%s (%s) after exactly one request', async (status, retryable, code) => {
    server.reply(oa.error(status, 'failed', 'some_error'));
    const e = await failureOf(callModel(model()).response);
    expect(server.requests).toHaveLength(1);
    expect(e).toMatchObject({ name: 'ProviderError', retryable, providerCode: code, status });
  });

  it('obeys x-should-retry: false', async () => {
    server.reply(oa.error(500, 'do not retry', 'server_error', { 'x-should-retry': 'false' }));
    expect(await failureOf(callModel(model()).response)).toMatchObject({ retryable: false, status: 500 });
  });

  it('reports a stream broken after output began as partial output, retryable', async () => {
    server.reply(oa.stream([oa.role(), oa.text('Hel'), oa.text('lo'), oa.finish('stop')], { cutAfter: 3 }));
    const { events, response } = callModel(model());
    const e = await failureOf(response);
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
    ]);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, partialOutput: true, providerCode: 'stream_interrupted' });
  });

  it('reports a stream broken before any output as a connection failure without partial output', async () => {
    server.reply(oa.stream([oa.role(), oa.text('Hel')], { cutAfter: 1 }));
    expect(await failureOf(callModel(model()).response)).toMatchObject({
      retryable: true,
      partialOutput: false,
      providerCode: 'connection',
    });
  });

  it('refuses a stream that ends without a finish_reason', async () => {
    server.reply(oa.stream([oa.role(), oa.text('Hel')], { done: false }));
    expect(await failureOf(callModel(model()).response)).toMatchObject({
      retryable: true,
      partialOutput: true,
      providerCode: 'stream_interrupted',
    });
  });

  it('maps an error chunk inside the stream', async () => {
    server.reply(oa.stream([oa.role(), oa.text('x'), { error: { message: 'The server had an error', type: 'server_error', code: null } }]));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, partialOutput: true, providerCode: 'server' });
    expect(e.message).toContain('The server had an error');
  });

  it('maps unreadable stream data to a retryable bad_response', async () => {
    server.reply({ kind: 'sse', events: [{ data: JSON.stringify(oa.text('a')) }, { data: '{"choices": [' }] });
    const quiet = openaiModel({ client: client({ logLevel: 'off' }), model: 'm' });
    expect(await failureOf(callModel(quiet).response)).toMatchObject({
      retryable: true,
      partialOutput: true,
      providerCode: 'bad_response',
    });
  });

  it('maps connection refused and client timeouts to retryable errors', async () => {
    const refused = openaiModel({
      client: new OpenAI({ apiKey: 'test', baseURL: `http://127.0.0.1:${await closedPort()}/v1` }),
      model: 'm',
    });
    expect(await failureOf(callModel(refused).response)).toMatchObject({ retryable: true, providerCode: 'connection' });
    const slow = openaiModel({ client: client({ timeout: 100 }), model: 'm' });
    server.reply(oa.stream([oa.text('late'), oa.finish('stop')], { headersDelayMs: 1000 }));
    expect(await failureOf(callModel(slow).response)).toMatchObject({ retryable: true, providerCode: 'timeout' });
    expect(server.requests).toHaveLength(1);
  });
});

describe('openaiModel cancellation', () => {
  it('throws CancelledError when the signal aborts mid-stream, and closes the connection', async () => {
    server.reply(oa.stream([oa.role(), ...Array.from({ length: 20 }, (_, i) => oa.text(`t${i} `)), oa.finish('stop')], { delayMs: 30 }));
    const ac = new AbortController();
    const m = model();
    const e = await failureOf(m.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: ac.signal }, () => ac.abort()));
    expect(isCancelledError(e)).toBe(true);
    expect(isProviderError(e)).toBe(false);
    await vi.waitFor(() => expect(server.requests[0].clientClosed).toBe(true));
  });

  it('throws CancelledError while waiting for headers, and without a request when already aborted', async () => {
    server.reply(oa.stream([oa.text('x'), oa.finish('stop')], { headersDelayMs: 2000 }));
    const { response } = callModel(model(), { signal: AbortSignal.timeout(50) });
    expect(isCancelledError(await failureOf(response))).toBe(true);
    server.reset();
    expect(isCancelledError(await failureOf(callModel(model(), { signal: AbortSignal.abort() }).response))).toBe(true);
    expect(server.requests).toHaveLength(0);
  });

  it('rethrows an error thrown by onEvent unchanged', async () => {
    server.reply(oa.textReply(['a', 'b']));
    const boom = new Error('listener broke');
    const e = await failureOf(
      model().call({ messages: [], tools: [], signal: new AbortController().signal }, () => {
        throw boom;
      }),
    );
    expect(e).toBe(boom);
  });
});

describe('openaiModel options', () => {
  it('validates its options', () => {
    expect(() => openaiModel({ model: 'x' } as never)).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    expect(() => openaiModel({ client: {} as never, model: 'x' })).toThrow(/OpenAI client/);
    expect(() => openaiModel({ client: client(), model: 'x', temperature: 3 })).toThrow(/temperature/);
  });

  it('builds a client from the environment', async () => {
    vi.stubEnv('OPENAI_API_KEY', 'env-key');
    vi.stubEnv('OPENAI_BASE_URL', server.baseURL);
    server.reply(oa.textReply(['from env']));
    const m = await openaiModelFromEnv({ model: 'gpt-env' });
    expect(m.modelId).toBe('gpt-env');
    expect((await callModel(m).response).message.content).toBe('from env');
    expect(server.requests[0].headers.authorization).toBe('Bearer env-key');
    vi.stubEnv('OPENAI_API_KEY', '');
    expect(isValidationError(await failureOf(openaiModelFromEnv({ model: 'x' })))).toBe(true);
  });
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('openaiModel: compatible servers and broken streams', () => {
  it('keeps parallel tool calls apart when a compatible server (Gemini) omits tool_calls[].index', async () => {
    // Gemini's OpenAI-compatible endpoint streams each call whole, with its own id, and no `index`.
    server.reply(
      oa.stream([
        oa.delta({
          role: 'assistant',
          tool_calls: [{ id: 'function-call-1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
        }),
        oa.delta({
          tool_calls: [{ id: 'function-call-2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }],
        }),
        oa.finish('stop'),
      ]),
    );
    const res = await callModel(model()).response;
    expect(res.finishReason).toBe('tool_calls');
    expect(res.message.toolCalls).toEqual([
      { id: 'function-call-1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'function-call-2', name: 'get_weather', arguments: '{"city":"Rome"}' },
    ]);
  });

  it('classifies an in-stream bad-request error chunk with a numeric code (vLLM / LiteLLM shape) as not retryable', async () => {
    server.reply(
      oa.stream([
        oa.role(),
        {
          error: {
            object: 'error',
            message: "This model's maximum context length is 4096 tokens",
            type: 'BadRequestError',
            param: null,
            code: 400,
          },
        },
      ]),
    );
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: false, providerCode: 'bad_request' });
  });

  it('returns the response when the connection drops after finish_reason and the usage chunk (only [DONE] missing)', async () => {
    server.reply(oa.stream([oa.role(), oa.text('Hello'), oa.finish('stop'), oa.usage(10, 2)], { cutAfter: 4 }));
    const res = await callModel(model()).response;
    expect(res).toMatchObject({ finishReason: 'stop', message: { content: 'Hello' }, usage: { inputTokens: 10, outputTokens: 2 } });
  });

  // guarantees.md: the response check must fail only a *bad* response. The openai adapter maps
  // cached_tokens: null to cachedInputTokens: null, which ModelResponseSchema (Usage) refuses: the run
  // fails with a non-retryable invalid_response on an ordinary answer.
  it('an OpenAI-compatible stream whose usage chunk has cached_tokens: null (LiteLLM-style) is a valid response, not invalid_response', async () => {
    const nullCached = {
      ...oa.usage(20, 4),
      usage: {
        prompt_tokens: 20,
        completion_tokens: 4,
        total_tokens: 24,
        prompt_tokens_details: { cached_tokens: null, audio_tokens: null },
        completion_tokens_details: null,
      },
    };
    server.reply(oa.stream([oa.role(), oa.text('Hello'), oa.finish('stop'), nullCached]));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' });
    const { runtime: rt } = memRuntime({ model });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    expect(r.error?.message).toBeUndefined();
    expect(r.status).toBe('succeeded');
    expect(r.finalMessage).toBe('Hello');
  });
});

describe('openaiModel: insufficient_quota', () => {
  // OpenAI documents this 429 as "You have run out of credits or hit your maximum monthly spend —
  // buy more credits": waiting does not fix it. The adapter already knows that: the same error
  // inside a stream (classifyStreamErrorType) is `permission`, not retryable. Over HTTP it is
  // classified by status alone, so the runtime retries it maxProviderAttempts times (each a
  // logged rate_limit attempt) before the run fails.
  it('an HTTP 429 insufficient_quota is a non-retryable ProviderError, like the same error inside a stream', async () => {
    server.reply(quotaExceeded());
    const http = await failureOf(callModel(model()).response);

    server.reply(oa.stream([oa.role(), { error: quotaExceeded().body.error }]));
    const inStream = await failureOf(callModel(model()).response);
    expect(inStream).toMatchObject({ name: 'ProviderError', retryable: false, providerCode: 'permission' });

    expect(http).toMatchObject({ name: 'ProviderError', status: 429, retryable: false });
  });
});

describe('openaiModel: no delta after an abort', () => {
  it('delivers no deltas to onEvent after the signal aborted between chunks', async () => {
    server.reply(oa.textReply(['a', 'b', 'c']));
    const { error, seen } = await abortOnFirstDelta(model());
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toEqual(['a']);
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
      model().call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: ac.signal }, (e) => {
        seen.push(e);
        ac.abort();
      }),
    );
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toHaveLength(1);
  });
});
