import Anthropic from '@anthropic-ai/sdk';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { isCancelledError, isProviderError, isValidationError } from '../../src/contracts/errors.js';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import { anthropicModel, anthropicModelFromEnv, type AnthropicModelOptions } from '../../src/providers/anthropic.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { abortOnFirstDelta, callModel, failureOf, type ScriptedServer } from './sse-server.js';

let server: ScriptedServer;
beforeAll(async () => void (server = await startAnthropicServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());
afterEach(() => vi.unstubAllEnvs());

// The SDK's default retries (2) stay on in the client: only the per-request `maxRetries: 0` keeps one request.
const client = () => new Anthropic({ apiKey: 'test', baseURL: server.baseURL });
const model = (opts: Partial<AnthropicModelOptions> = {}) => anthropicModel({ client: client(), model: 'claude-test', ...opts });
const user = (content: string): Message => ({ role: 'user', content });

const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** A reply with a signed thinking block, a text block and one tool call. */
const thinkingToolReply = () =>
  an.stream([
    an.start(),
    an.thinkingStart(0),
    an.thinking(0, 'Let me '),
    an.thinking(0, 'check.'),
    an.signature(0, 'sig-abc=='),
    an.blockStop(0),
    an.textStart(1),
    an.text(1, 'Checking.'),
    an.blockStop(1),
    an.toolStart(2, 'toolu_1', 'get_weather'),
    an.json(2, '{"city":'),
    an.json(2, '"Paris"}'),
    an.blockStop(2),
    an.messageDelta('tool_use'),
    an.stop(),
  ]);

describe('anthropicModel request', () => {
  it('sends system as a param, merges same-role messages and pairs tool results with tool_use ids', async () => {
    const history: Message[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'Use metric units.' },
      user('Weather?'),
      user('In Paris and Rome.'),
      {
        role: 'assistant',
        content: 'Checking.',
        toolCalls: [
          { id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { id: 'toolu_2', name: 'get_weather', arguments: '' },
        ],
      },
      { role: 'tool', toolCallId: 'toolu_1', content: 'sunny' },
      { role: 'tool', toolCallId: 'toolu_2', content: 'rain' },
      user('And tomorrow?'),
    ];
    server.reply(an.textReply(['ok']));
    const m = model({ maxTokens: 1000, thinking: { type: 'enabled', budget_tokens: 200 }, extraBody: { metadata: { user_id: 'u1' } } });
    await callModel(m, { messages: history, tools: [weather], maxOutputTokens: 300 }).response;

    const req = server.requests[0];
    expect(req.path).toBe('/v1/messages');
    expect(req.headers['anthropic-version']).toBeTruthy();
    expect(req.body).toMatchObject({
      model: 'claude-test',
      max_tokens: 300,
      stream: true,
      system: 'Be brief.\n\nUse metric units.',
      thinking: { type: 'enabled', budget_tokens: 200 },
      metadata: { user_id: 'u1' },
    });
    expect(req.body.tools).toEqual([{ name: 'get_weather', description: 'Current weather in a city', input_schema: weather.parameters }]);
    expect(req.body.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Weather?' },
          { type: 'text', text: 'In Paris and Rome.' },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: 'rain' },
          { type: 'text', text: 'And tomorrow?' },
        ],
      },
    ]);
  });

  it('sends max_tokens = maxTokens (default 4096) unless the run asks for less, and no empty tools', async () => {
    server.reply(an.textReply(['a']), an.textReply(['b']));
    await callModel(model()).response;
    expect(server.lastBody().max_tokens).toBe(4096);
    expect(server.lastBody()).not.toHaveProperty('tools');
    expect(server.lastBody()).not.toHaveProperty('system');
    await callModel(model({ maxTokens: 100 }), { maxOutputTokens: 5000 }).response;
    expect(server.lastBody().max_tokens).toBe(100);
  });
});

describe('anthropicModel stream', () => {
  it('streams text and maps usage from message_start and message_delta', async () => {
    server.reply(
      an.stream([
        an.start({ input: 100, cacheRead: 50, cacheWrite: 10 }),
        an.textStart(0),
        an.ping(),
        an.text(0, 'Hel'),
        an.text(0, 'lo'),
        an.blockStop(0),
        an.messageDelta('end_turn', 42),
        an.stop(),
      ]),
    );
    const { events, response } = callModel(model());
    const res = await response;
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
    ]);
    expect(res.message).toMatchObject({ role: 'assistant', content: 'Hello' });
    expect(res.finishReason).toBe('stop');
    expect(res.usage).toEqual({ inputTokens: 160, outputTokens: 42, cachedInputTokens: 50 });
    expect(res.message.providerData?.anthropic).toMatchObject({
      id: 'msg_test1',
      stopReason: 'end_turn',
      usage: { input_tokens: 100, cache_read_input_tokens: 50 },
    });
    expect(res.message.providerData?.anthropic).not.toHaveProperty('content');
  });

  it('maps the thinking tokens message_delta reports (output_tokens_details.thinking_tokens) to usage.reasoningTokens, part of outputTokens', async () => {
    server.reply(
      an.stream([
        an.start({ input: 10 }),
        an.thinkingStart(0),
        an.thinking(0, 'hmm'),
        an.signature(0, 'sig'),
        an.blockStop(0),
        an.textStart(1),
        an.text(1, 'ok'),
        an.blockStop(1),
        {
          type: 'message_delta',
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 30, output_tokens_details: { thinking_tokens: 24 } },
        },
        an.stop(),
      ]),
    );
    const res = await callModel(model()).response;
    expect(res.usage).toEqual({ inputTokens: 10, outputTokens: 30, cachedInputTokens: 0, reasoningTokens: 24 });
  });

  it('keeps signed thinking blocks in providerData and sends them back verbatim', async () => {
    server.reply(thinkingToolReply());
    const { events, response } = callModel(model({ thinking: { type: 'enabled', budget_tokens: 1024 } }), { tools: [weather] });
    const res = await response;
    expect(events).toEqual([
      { type: 'thinking_delta', text: 'Let me ' },
      { type: 'thinking_delta', text: 'check.' },
      { type: 'text_delta', text: 'Checking.' },
      { type: 'toolcall_delta', index: 0, callId: 'toolu_1', name: 'get_weather', argumentsDelta: '' },
      { type: 'toolcall_delta', index: 0, argumentsDelta: '{"city":' },
      { type: 'toolcall_delta', index: 0, argumentsDelta: '"Paris"}' },
    ]);
    expect(res.finishReason).toBe('tool_calls');
    expect(res.message.content).toBe('Checking.');
    expect(res.message.toolCalls).toEqual([{ id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    const blocks = [
      { type: 'thinking', thinking: 'Let me check.', signature: 'sig-abc==' },
      { type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
    ];
    expect((res.message.providerData?.anthropic as { content?: unknown }).content).toEqual(blocks);

    server.reply(an.textReply(['Sunny in Paris.']));
    const tool: Message = { role: 'tool', toolCallId: 'toolu_1', content: 'sunny' };
    // The message passes through JSON, as it would through the event log.
    const logged = JSON.parse(JSON.stringify(res.message)) as Message;
    await callModel(model(), { messages: [user('Weather in Paris?'), logged, tool] }).response;
    expect(server.lastBody().messages.slice(1)).toEqual([
      { role: 'assistant', content: blocks },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ]);

    // An edited message keeps its thinking block first; the rest is rebuilt from the message.
    server.reply(an.textReply(['ok']));
    await callModel(model(), { messages: [user('Weather in Paris?'), { ...logged, content: 'Edited.' }, tool] }).response;
    expect(server.lastBody().messages[1].content).toEqual([blocks[0], { type: 'text', text: 'Edited.' }, blocks[2]]);
  });

  it('round-trips redacted_thinking blocks', async () => {
    server.reply(
      an.stream([
        an.start(),
        an.blockStart(0, { type: 'redacted_thinking', data: 'opaque==' }),
        an.blockStop(0),
        an.textStart(1),
        an.text(1, 'Hi.'),
        an.blockStop(1),
        an.messageDelta('end_turn'),
        an.stop(),
      ]),
    );
    const res = await callModel(model()).response;
    server.reply(an.textReply(['ok']));
    await callModel(model(), { messages: [user('a'), res.message, user('b')] }).response;
    expect(server.lastBody().messages[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'redacted_thinking', data: 'opaque==' },
        { type: 'text', text: 'Hi.' },
      ],
    });
  });

  it('assembles interleaved tool_use blocks by content block index; empty input is "{}"', async () => {
    server.reply(
      an.stream([
        an.start(),
        an.textStart(0),
        an.text(0, 'On it.'),
        an.blockStop(0),
        an.toolStart(1, 'toolu_a', 'get_weather'),
        an.toolStart(2, 'toolu_b', 'get_time'),
        an.json(1, '{"ci'),
        an.json(2, '{"tz"'),
        an.json(1, 'ty":"Rome"}'),
        an.json(2, ':"UTC"'),
        an.blockStop(1),
        an.blockStop(2),
        an.toolStart(3, 'toolu_c', 'now'),
        an.blockStop(3),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
    );
    const { events, response } = callModel(model());
    const res = await response;
    expect(res.message.toolCalls).toEqual([
      { id: 'toolu_a', name: 'get_weather', arguments: '{"city":"Rome"}' },
      { id: 'toolu_b', name: 'get_time', arguments: '{"tz":"UTC"' },
      { id: 'toolu_c', name: 'now', arguments: '{}' },
    ]);
    expect(events.filter((e) => e.type === 'toolcall_delta').map((e) => (e.type === 'toolcall_delta' ? e.index : -1))).toEqual([
      0, 1, 0, 1, 0, 1, 2,
    ]);
  });

  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
  ])('maps stop_reason %s to %s', async (raw, mapped) => {
    server.reply(an.textReply(['x'], raw));
    const res = await callModel(model()).response;
    expect(res.finishReason).toBe(mapped);
    expect(res.message.providerData?.anthropic).toMatchObject({ stopReason: raw });
  });

  it('maps a refusal with its text, or the stop_details explanation when there is no text', async () => {
    const details = { type: 'refusal', category: 'cyber', explanation: 'This request could enable harm.' };
    server.reply(
      an.textReply(["I can't help with that."], 'refusal', { stop_details: details }),
      an.textReply([], 'refusal', { stop_details: details }),
    );
    const res = await callModel(model()).response;
    expect(res).toMatchObject({ finishReason: 'refusal', refusal: "I can't help with that." });
    expect(res.message.providerData?.anthropic).toMatchObject({ stopReason: 'refusal', stopDetails: details });
    expect(await callModel(model()).response).toMatchObject({ finishReason: 'refusal', refusal: 'This request could enable harm.' });
  });
});

describe('anthropicModel errors', () => {
  it('turns one 429 into one request and a retryable ProviderError with retry-after', async () => {
    server.reply(an.error(429, 'rate_limit_error', 'Number of requests has exceeded your rate limit', { 'retry-after': '2' }));
    const e = await failureOf(callModel(model()).response);
    expect(server.requests).toHaveLength(1);
    expect(e).toMatchObject({
      name: 'ProviderError',
      retryable: true,
      providerCode: 'rate_limit',
      status: 429,
      retryAfterMs: 2000,
      partialOutput: false,
    });
  });

  it.each([
    [529, true, 'overloaded'],
    [500, true, 'server'],
    [408, true, 'timeout'],
    [400, false, 'bad_request'],
    [401, false, 'auth'],
    [403, false, 'permission'],
    [404, false, 'not_found'],
    [413, false, 'too_large'],
  ])('maps HTTP %i to retryable=%s (%s) after exactly one request', async (status, retryable, code) => {
    server.reply(an.error(status, 'some_error', 'failed'));
    const e = await failureOf(callModel(model()).response);
    expect(server.requests).toHaveLength(1);
    expect(e).toMatchObject({ name: 'ProviderError', retryable, providerCode: code, status });
  });

  it('maps an error event in the stream by its type, with partial output when text had streamed', async () => {
    server.reply(an.stream([an.start(), an.textStart(0), an.text(0, 'Hel'), an.streamError('overloaded_error', 'Overloaded')]));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, partialOutput: true, providerCode: 'overloaded' });
    server.reply(an.stream([an.start(), an.streamError('invalid_request_error', 'bad thinking signature')]));
    expect(await failureOf(callModel(model()).response)).toMatchObject({
      retryable: false,
      partialOutput: false,
      providerCode: 'bad_request',
    });
  });

  it('reports a stream broken after output began, and one that ends without message_stop', async () => {
    server.reply(an.stream([an.start(), an.textStart(0), an.text(0, 'Hel'), an.text(0, 'lo'), an.blockStop(0)], { cutAfter: 4 }));
    const { events, response } = callModel(model());
    expect(await failureOf(response)).toMatchObject({ retryable: true, partialOutput: true, providerCode: 'stream_interrupted' });
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
    ]);
    server.reply(an.stream([an.start(), an.textStart(0), an.text(0, 'Hel'), an.blockStop(0), an.messageDelta('end_turn')]));
    expect(await failureOf(callModel(model()).response)).toMatchObject({
      retryable: true,
      partialOutput: true,
      providerCode: 'stream_interrupted',
    });
  });
});

describe('anthropicModel cancellation and options', () => {
  it('throws CancelledError when the signal aborts mid-stream, and closes the connection', async () => {
    server.reply(
      an.stream(
        [
          an.start(),
          an.textStart(0),
          ...Array.from({ length: 20 }, (_, i) => an.text(0, `t${i} `)),
          an.blockStop(0),
          an.messageDelta('end_turn'),
          an.stop(),
        ],
        { delayMs: 30 },
      ),
    );
    const ac = new AbortController();
    const e = await failureOf(model().call({ messages: [user('hi')], tools: [], signal: ac.signal }, () => ac.abort()));
    expect(isCancelledError(e)).toBe(true);
    expect(isProviderError(e)).toBe(false);
    await vi.waitFor(() => expect(server.requests[0].clientClosed).toBe(true));
  });

  it('validates its options and builds a client from the environment', async () => {
    expect(() => anthropicModel({ client: client(), model: '' })).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    expect(() => anthropicModel({ client: client(), model: 'm', maxTokens: 0 })).toThrow(/maxTokens/);
    expect(() => anthropicModel({ client: { messages: {} } as never, model: 'm' })).toThrow(/Anthropic client/);
    vi.stubEnv('ANTHROPIC_API_KEY', 'env-key');
    vi.stubEnv('ANTHROPIC_BASE_URL', server.baseURL);
    server.reply(an.textReply(['from env']));
    const m = await anthropicModelFromEnv({ model: 'claude-env' });
    expect((await callModel(m).response).message.content).toBe('from env');
    expect(server.lastBody().model).toBe('claude-env');
    vi.stubEnv('ANTHROPIC_API_KEY', '');
    expect(isValidationError(await failureOf(anthropicModelFromEnv({ model: 'x' })))).toBe(true);
  });
});

describe('anthropicModel: broken streams and aborts', () => {
  it('returns the response when the connection drops after message_stop', async () => {
    server.reply(
      an.stream([an.start(), an.textStart(0), an.text(0, 'Hello'), an.blockStop(0), an.messageDelta('end_turn', 2), an.stop()], {
        cutAfter: 6,
      }),
    );
    const res = await callModel(model()).response;
    expect(res).toMatchObject({ finishReason: 'stop', message: { content: 'Hello' }, usage: { outputTokens: 2 } });
  });

  it('delivers no deltas to onEvent after the signal aborted between chunks', async () => {
    server.reply(an.textReply(['a', 'b', 'c']));
    const { error, seen } = await abortOnFirstDelta(model());
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toEqual(['a']);
  });
});
