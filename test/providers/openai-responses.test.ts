import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { isCancelledError, isValidationError } from '../../src/contracts/errors.js';
import { addUsage, type ModelMessage as Message } from '../../src/contracts/message.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import {
  openaiResponsesModel,
  openaiResponsesModelFromEnv,
  type OpenAIResponsesModelOptions,
} from '../../src/providers/openai-responses.js';
import { toResponsesInput, toResponsesParts } from '../../src/providers/openai-responses-input.js';
import { rs, startResponsesServer } from './responses-server.js';
import { abortOnFirstDelta, callModel, failureOf, type ScriptedServer } from './sse-server.js';

let server: ScriptedServer;
beforeAll(async () => void (server = await startResponsesServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());
afterEach(() => vi.unstubAllEnvs());

// A client with the SDK's default retries (2): only the per-request `maxRetries: 0` keeps it at one request.
const client = (opts: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) =>
  new OpenAI({ apiKey: 'test', baseURL: server.baseURL, ...opts });
const model = (opts: Partial<OpenAIResponsesModelOptions> = {}) => openaiResponsesModel({ client: client(), model: 'gpt-test', ...opts });

const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

const reasoning = rs.reasoning('rs_1', 'gAAAAB-encrypted-1==', ['Need the weather. ', 'Call the tool.']);
const call = rs.call('fc_1', 'call_1', 'get_weather', '{"city":"Paris"}');

describe('openaiResponsesModel request', () => {
  it('posts to /responses with store: false, encrypted reasoning included, input items, function tools, caps and extra body', async () => {
    const history: Message[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
      { role: 'tool', toolCallId: 'call_1', content: 'sunny' },
    ];
    server.reply(rs.textReply(['ok']));
    const m = model({
      temperature: 0.2,
      maxTokens: 500,
      systemRole: 'developer',
      reasoning: { effort: 'low' },
      extraBody: { metadata: { a: '1' } },
    });
    await callModel(m, { messages: history, tools: [weather], maxOutputTokens: 300 }).response;

    const req = server.requests[0]!;
    expect(req.path).toBe('/v1/responses');
    expect(req.body).toEqual({
      model: 'gpt-test',
      input: [
        { type: 'message', role: 'developer', content: 'Be brief.' },
        { type: 'message', role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
      ],
      tools: [{ type: 'function', name: 'get_weather', description: weather.description, parameters: weather.parameters, strict: false }],
      temperature: 0.2,
      max_output_tokens: 300,
      reasoning: { effort: 'low' },
      store: false,
      include: ['reasoning.encrypted_content'],
      metadata: { a: '1' },
      stream: true,
    });
    expect(server.requests).toHaveLength(1);
  });

  it('asks for the run output schema as text.format json_schema, with its strictness', async () => {
    server.reply(rs.textReply(['{"n":1}']));
    const schema = { type: 'object', properties: { n: { type: 'number' } }, required: ['n'], additionalProperties: false };
    await callModel(model(), { output: { name: 'answer', schema, strict: true } }).response;
    expect(server.lastBody().text).toEqual({ format: { type: 'json_schema', name: 'answer', schema, strict: true } });
  });

  it('asks for encrypted reasoning from reasoning models only, unless told (the API refuses it for others)', async () => {
    const include = async (opts: Partial<OpenAIResponsesModelOptions>) => {
      server.reply(rs.textReply(['ok']));
      await callModel(model(opts)).response;
      return server.lastBody().include;
    };
    expect(await include({ model: 'gpt-4.1-mini' })).toBeUndefined();
    expect(await include({ model: 'gpt-5-chat-latest' })).toBeUndefined();
    expect(await include({ model: 'o4-mini' })).toEqual(['reasoning.encrypted_content']);
    expect(await include({ model: 'gpt-5-mini' })).toEqual(['reasoning.encrypted_content']);
    expect(await include({ model: 'o3', encryptedReasoning: false })).toBeUndefined();
    expect(await include({ model: 'my-reasoner', encryptedReasoning: true })).toEqual(['reasoning.encrypted_content']);
    expect(await include({ model: 'my-reasoner', reasoning: { effort: 'high' } })).toEqual(['reasoning.encrypted_content']);
    for (const b of server.requests) expect(b.body.store).toBe(false);
  });

  it('maps content parts to input_text, input_image (URL or data URL) and input_file (data URL with a filename)', () => {
    expect(
      toResponsesParts([
        { type: 'text', text: 'Look:' },
        { type: 'image', url: 'https://example.com/cat.png' },
        { type: 'image', data: 'iVBORw0KGgo=', mediaType: 'image/png' },
        { type: 'file', data: 'JVBERi0=', mediaType: 'application/pdf', filename: 'invoice.pdf' },
        { type: 'file', data: 'JVBERi0=', mediaType: 'application/pdf' },
      ]),
    ).toEqual([
      { type: 'input_text', text: 'Look:' },
      { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'auto' },
      { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'auto' },
      { type: 'input_file', file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'invoice.pdf' },
      { type: 'input_file', file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'file.pdf' },
    ]);
    // a message whose content is parts (user input, tool result) is sent as parts; text stays a string
    const parts = [{ type: 'image', url: 'https://example.com/cat.png' }];
    const input = toResponsesInput([
      { role: 'user', content: parts as unknown as string },
      { role: 'tool', toolCallId: 'c', content: parts as unknown as string },
    ]);
    expect(input).toEqual([
      { type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'auto' }] },
      {
        type: 'function_call_output',
        call_id: 'c',
        output: [{ type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'auto' }],
      },
    ]);
    // a system or assistant message takes text only: an image there is refused before any request
    for (const role of ['system', 'assistant'] as const)
      expect(() => toResponsesInput([{ role, content: parts as Message['content'] }])).toThrow(
        expect.objectContaining({ name: 'ProviderError', providerCode: 'unsupported_content', retryable: false }),
      );
  });
});

describe('openaiResponsesModel stream', () => {
  it('streams text deltas and maps usage with cached and reasoning tokens', async () => {
    server.reply(rs.textReply(['Hel', 'lo'], rs.usage(100, 30, 60, 12)));
    const { events, response } = callModel(model());
    const res = await response;
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
    ]);
    expect(res).toMatchObject({ message: { role: 'assistant', content: 'Hello' }, finishReason: 'stop' });
    expect(res.usage).toEqual({ inputTokens: 100, outputTokens: 30, cachedInputTokens: 60, reasoningTokens: 12 });
    expect(addUsage(res.usage!, { inputTokens: 1, outputTokens: 1 })).toEqual({
      inputTokens: 101,
      outputTokens: 31,
      cachedInputTokens: 60,
      reasoningTokens: 12,
    });
  });

  it('streams the reasoning summary as thinking_delta and function-call arguments as toolcall_delta; keeps the output items', async () => {
    server.reply(rs.reasoningCallReply(reasoning, call));
    const { events, response } = callModel(model(), { tools: [weather] });
    const res = await response;
    expect(events).toEqual([
      { type: 'thinking_delta', text: 'Need the weather. ' },
      { type: 'thinking_delta', text: 'Call the tool.' },
      { type: 'toolcall_delta', index: 0, callId: 'call_1', name: 'get_weather', argumentsDelta: '' },
      { type: 'toolcall_delta', index: 0, argumentsDelta: '{"city":' },
      { type: 'toolcall_delta', index: 0, argumentsDelta: '"Paris"}' },
    ]);
    expect(res.finishReason).toBe('tool_calls');
    expect(res.message.toolCalls).toEqual([{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    expect(res.message.providerData).toEqual({
      openaiResponses: { id: 'resp_test1', model: 'gpt-test', status: 'completed', output: [reasoning, call] },
    });
    expect(res.usage).toMatchObject({ reasoningTokens: 20 });
  });

  it('sends an assistant message back as its kept output items, reasoning first; an edited message keeps only the reasoning', () => {
    const kept: Message = {
      role: 'assistant',
      content: '',
      toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
      providerData: { openaiResponses: { output: [reasoning, call] } },
    };
    expect(toResponsesInput([kept])).toEqual([reasoning, call]);
    const edited: Message = { ...kept, toolCalls: [{ id: 'call_9', name: 'get_weather', arguments: '{"city":"Rome"}' }] };
    expect(toResponsesInput([edited])).toEqual([
      reasoning,
      { type: 'function_call', call_id: 'call_9', name: 'get_weather', arguments: '{"city":"Rome"}' },
    ]);
  });

  it('maps two parallel calls by output index and an incomplete response to length', async () => {
    const second = rs.call('fc_2', 'call_2', 'get_weather', '{"city":"Rome"}');
    server.reply(
      rs.stream([
        rs.created(),
        rs.added(0, { ...call, arguments: '' }),
        rs.added(1, { ...second, arguments: '' }),
        rs.args(1, 'fc_2', '{"city":"Rome"}'),
        rs.args(0, 'fc_1', '{"city":"Paris"}'),
        rs.done(0, call),
        rs.done(1, second),
        rs.completed([call, second]),
      ]),
      rs.stream([rs.created(), rs.text(0, 'msg_1', 'Cut'), rs.incomplete('max_output_tokens', [rs.message('msg_1', 'Cut')])]),
    );
    const res = await callModel(model()).response;
    expect(res.message.toolCalls?.map((c) => [c.id, c.arguments])).toEqual([
      ['call_1', '{"city":"Paris"}'],
      ['call_2', '{"city":"Rome"}'],
    ]);
    const cut = await callModel(model()).response;
    expect(cut).toMatchObject({
      finishReason: 'length',
      message: { content: 'Cut', providerData: { openaiResponses: { incompleteReason: 'max_output_tokens' } } },
    });
  });

  it('maps a refusal to finishReason refusal with its text', async () => {
    const item = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'refusal', refusal: 'No.' }] };
    server.reply(rs.stream([rs.created(), rs.refusal(0, 'msg_1', 'No.'), rs.done(0, item), rs.completed([item])]));
    expect(await callModel(model()).response).toMatchObject({ finishReason: 'refusal', refusal: 'No.', message: { content: '' } });
  });
});

describe('openaiResponsesModel failures', () => {
  it('turns one 429 with retry-after into one request and a retryable ProviderError with retryAfterMs', async () => {
    server.reply(rs.httpError(429, 'Rate limit reached', 'requests', { 'retry-after': '2' }));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, providerCode: 'rate_limit', status: 429, retryAfterMs: 2000 });
    expect(server.requests).toHaveLength(1);
  });

  it('reports a connection dropped mid-stream as retryable stream_interrupted with partial output', async () => {
    server.reply(rs.stream([rs.created(), rs.text(0, 'msg_1', 'Hel'), rs.text(0, 'msg_1', 'lo'), rs.completed([])], { cutAfter: 3 }));
    const { events, response } = callModel(model());
    const e = await failureOf(response);
    expect(events).toEqual([
      { type: 'text_delta', text: 'Hel' },
      { type: 'text_delta', text: 'lo' },
    ]);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, partialOutput: true, providerCode: 'stream_interrupted' });
  });

  it('refuses a stream that ends before response.completed', async () => {
    server.reply(rs.stream([rs.created(), rs.text(0, 'msg_1', 'Hel')]));
    expect(await failureOf(callModel(model()).response)).toMatchObject({ retryable: true, providerCode: 'stream_interrupted' });
  });

  it('maps unreadable stream data to a retryable bad_response', async () => {
    server.reply({
      kind: 'sse',
      events: [
        { event: 'response.created', data: JSON.stringify({ ...rs.created(), sequence_number: 0 }) },
        { event: 'response.output_text.delta', data: '{"type": "response.output_text.delta", "delta": ' },
      ],
    });
    const quiet = openaiResponsesModel({ client: client({ logLevel: 'off' }), model: 'm' });
    expect(await failureOf(callModel(quiet).response)).toMatchObject({
      name: 'ProviderError',
      retryable: true,
      providerCode: 'bad_response',
    });
  });

  it('maps response.failed and an error event by their codes', async () => {
    server.reply(
      rs.stream([rs.created(), rs.text(0, 'msg_1', 'x'), rs.failed('server_error', 'The server had an error')]),
      rs.stream([rs.created(), rs.error('invalid_prompt', 'Bad prompt')]),
    );
    const failed = await failureOf(callModel(model()).response);
    expect(failed).toMatchObject({ name: 'ProviderError', retryable: true, providerCode: 'server', partialOutput: true });
    expect(failed.message).toContain('The server had an error');
    expect(await failureOf(callModel(model()).response)).toMatchObject({
      retryable: false,
      providerCode: 'bad_request',
      partialOutput: false,
    });
  });

  it('an abort mid-stream is a CancelledError and no delta follows it', async () => {
    server.reply(rs.textReply(['one', 'two', 'three']));
    const { error, seen } = await abortOnFirstDelta(model());
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toEqual(['one']);
  });
});

describe('openaiResponsesModel options', () => {
  it('validates its options: a client with responses.create, a known key set', () => {
    expect(() => openaiResponsesModel({ client: {} as never, model: 'x' })).toThrow(/OpenAI client/);
    expect(() => openaiResponsesModel({ client: client(), model: 'x', reasoning: { effort: 'low', budget: 1 } as never })).toThrow(
      expect.objectContaining({ name: 'ValidationError' }),
    );
  });

  it('builds a client from OPENAI_API_KEY and OPENAI_BASE_URL', async () => {
    vi.stubEnv('OPENAI_API_KEY', 'env-key');
    vi.stubEnv('OPENAI_BASE_URL', server.baseURL);
    server.reply(rs.textReply(['from env']));
    const m = await openaiResponsesModelFromEnv({ model: 'gpt-env' });
    expect((await callModel(m).response).message.content).toBe('from env');
    expect(server.requests[0]!.headers.authorization).toBe('Bearer env-key');
    vi.stubEnv('OPENAI_API_KEY', '');
    expect(isValidationError(await failureOf(openaiResponsesModelFromEnv({ model: 'x' })))).toBe(true);
  });
});
