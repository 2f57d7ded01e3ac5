import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  anthropicModel,
  defineTool,
  isProviderError,
  type AnthropicModelOptions,
  type Envelope,
  type RuntimeOptions,
} from '../../src/index.js';
import { ids, lmdbRuntime, logOf, typesOf } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import type { ScriptedServer } from './sse-server.js';
import { deltas, expectDiscardedThenRetried } from './stream-envelopes.js';

/**
 * Whole runs through `session.execute` with the real `@anthropic-ai/sdk` client against the local
 * Messages wire-format server: the engine's surface messages → adapter → HTTP body, and the
 * streamed events → adapter → log / live envelopes.
 */

let server: ScriptedServer;
beforeAll(async () => void (server = await startAnthropicServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());

const SYSTEM = 'You are a terse weather bot.';

/** A client with the SDK's default retries: only the adapter's per-request `maxRetries: 0` applies. */
const model = (opts: Partial<AnthropicModelOptions> = {}) =>
  anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }), model: 'claude-test', maxTokens: 2048, ...opts });

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

function setup(extra: Partial<Omit<RuntimeOptions, 'store' | 'model'>> = {}, modelOpts: Partial<AnthropicModelOptions> = {}) {
  const { tool, calls } = weatherTool();
  const { runtime, store } = lmdbRuntime({ model: model(modelOpts), tools: [tool], systemPrompt: SYSTEM, ...extra });
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
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: expect.objectContaining({
    type: 'object',
    properties: { city: { type: 'string', description: 'City name' }, days: expect.objectContaining({ type: 'integer' }) },
    required: ['city'],
  }),
};

/** A streamed tool_use block at `index` with its input split over two input_json_delta events. */
const toolBlock = (index: number, id: string, json: [string, string]) => [
  an.toolStart(index, id, 'get_weather'),
  an.json(index, json[0]),
  an.json(index, json[1]),
  an.blockStop(index),
];

describe('anthropicModel in a full run (real SDK, local server)', () => {
  it('text + tool_use, then a streamed final answer: result, tool args, live deltas, log and the second request body', async () => {
    server.reply(
      an.stream([
        an.start({ input: 30 }),
        an.textStart(0),
        an.text(0, 'Let me '),
        an.text(0, 'look.'),
        an.blockStop(0),
        ...toolBlock(1, 'toolu_01', ['{"city":', ' "Paris"}']),
        an.messageDelta('tool_use', 18),
        an.stop(),
      ]),
      an.stream([
        an.start({ input: 50, cacheRead: 10 }),
        an.textStart(0),
        an.ping(),
        an.text(0, 'It is '),
        an.text(0, 'sunny in '),
        an.text(0, 'Paris.'),
        an.blockStop(0),
        an.messageDelta('end_turn', 9),
        an.stop(),
      ]),
    );
    const { runtime, store, calls } = setup();
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Weather in Paris?' });

    expect(r).toMatchObject({ status: 'succeeded', outcome: 'completed', finalMessage: 'It is sunny in Paris.', steps: 2 });
    expect(calls).toEqual([{ city: 'Paris' }]);

    // live text deltas of both steps, one envelope per streamed text delta, in order
    expect(deltas(envelopes)).toEqual(['Let me ', 'look.', 'It is ', 'sunny in ', 'Paris.']);

    // the log
    const log = await logOf(store, 's');
    const types = typesOf(log);
    expect(types.indexOf('tool/call')).toBeGreaterThan(-1);
    expect(types.indexOf('tool/call')).toBeLessThan(types.indexOf('tool/result'));
    expect(log.find((e) => e.type === 'tool/call')!.payload).toMatchObject({
      callId: 'toolu_01',
      name: 'get_weather',
      arguments: { city: 'Paris' },
    });
    expect(log.find((e) => e.type === 'tool/result')!.payload).toMatchObject({
      callId: 'toolu_01',
      outcome: { kind: 'completed', content: 'sunny in Paris' },
    });
    const assistants = log.filter((e) => e.type === 'assistant/message').map((e) => e.payload);
    expect(assistants).toMatchObject([
      {
        message: {
          role: 'assistant',
          content: 'Let me look.',
          toolCalls: [{ id: 'toolu_01', name: 'get_weather', arguments: '{"city": "Paris"}' }],
        },
        usage: { inputTokens: 30, outputTokens: 18, cachedInputTokens: 0 },
        finishReason: 'tool_calls',
      },
      {
        message: { role: 'assistant', content: 'It is sunny in Paris.' },
        usage: { inputTokens: 60, outputTokens: 9, cachedInputTokens: 10 },
        finishReason: 'stop',
      },
    ]);
    expect(types).not.toContain('assistant/attempt');

    // the requests
    expect(server.requests).toHaveLength(2);
    for (const req of server.requests) {
      expect(req.path).toBe('/v1/messages');
      expect(req.body).toMatchObject({ model: 'claude-test', max_tokens: 2048, stream: true, system: SYSTEM });
      expect(req.body.tools).toEqual([expectedTool]);
      expect(req.body).not.toHaveProperty('thinking');
    }
    expect(server.requests[0]!.body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] }]);
    expect(server.requests[1]!.body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me look.' },
          { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'sunny in Paris' }] },
    ]);
  });

  it('two tool_use blocks in one response: both run, their tool_results share one user message', async () => {
    server.reply(
      an.stream([
        an.start(),
        ...toolBlock(0, 'toolu_a', ['{"city":"Par', 'is","days":2}']),
        ...toolBlock(1, 'toolu_b', ['{"ci', 'ty":"Rome"}']),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
      an.textReply(['Sunny ', 'in both.']),
    );
    const { runtime, calls } = setup();
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Paris and Rome?' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny in both.' });
    expect(calls).toEqual(expect.arrayContaining([{ city: 'Paris', days: 2 }, { city: 'Rome' }]));
    expect(calls).toHaveLength(2);
    expect(deltas(envelopes).join('')).toBe('Sunny in both.');

    const msgs = server.requests[1]!.body.messages as any[];
    expect(msgs).toHaveLength(3);
    expect(msgs[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: { city: 'Paris', days: 2 } },
        { type: 'tool_use', id: 'toolu_b', name: 'get_weather', input: { city: 'Rome' } },
      ],
    });
    expect(msgs[2].role).toBe('user');
    expect(msgs[2].content).toHaveLength(2);
    expect(msgs[2].content).toEqual(
      expect.arrayContaining([
        { type: 'tool_result', tool_use_id: 'toolu_a', content: 'sunny in Paris' },
        { type: 'tool_result', tool_use_id: 'toolu_b', content: 'sunny in Rome' },
      ]),
    );
  });

  it('a signed thinking block before the tool_use is replayed verbatim, also after the session is reloaded from LMDB', async () => {
    const thinking = {
      type: 'thinking',
      thinking: 'The user wants Paris. I should call the tool.',
      signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=',
    };
    server.reply(
      an.stream([
        an.start(),
        an.thinkingStart(0),
        an.thinking(0, 'The user wants Paris. '),
        an.thinking(0, 'I should call the tool.'),
        an.signature(0, thinking.signature),
        an.blockStop(0),
        ...toolBlock(1, 'toolu_t1', ['{"city"', ':"Paris"}']),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
      an.textReply(['Sunny.']),
    );
    const { runtime, store, calls } = setup({}, { thinking: { type: 'enabled', budget_tokens: 1024 } });
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Weather in Paris?' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny.' });
    expect(calls).toEqual([{ city: 'Paris' }]);
    // thinking is not part of the message_delta text
    expect(deltas(envelopes)).toEqual(['Sunny.']);

    const first = (await logOf(store, 's')).find((e) => e.type === 'assistant/message')!;
    expect(first.payload.message).toMatchObject({
      content: '',
      providerData: { anthropic: { content: [thinking, expect.objectContaining({ type: 'tool_use', id: 'toolu_t1' })] } },
    });

    expect(server.requests).toHaveLength(2);
    const second = server.requests[1]!.body;
    expect(second.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(second.system).toBe(SYSTEM);
    const replayed = {
      role: 'assistant',
      content: [thinking, { type: 'tool_use', id: 'toolu_t1', name: 'get_weather', input: { city: 'Paris' } }],
    };
    expect(second.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      replayed,
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_t1', content: 'sunny in Paris' }] },
    ]);

    // reopen: the surface comes back from the LMDB log, provider data included
    await session.close();
    const again = await runtime.openSession('s');
    server.reply(an.textReply(['Still sunny.']));
    expect((await again.execute({ kind: 'prompt', ...ids(), message: 'And now?' })).finalMessage).toBe('Still sunny.');
    expect(server.requests).toHaveLength(3);
    expect(server.requests[2]!.body.messages).toEqual([
      ...second.messages,
      { role: 'assistant', content: [{ type: 'text', text: 'Sunny.' }] },
      { role: 'user', content: [{ type: 'text', text: 'And now?' }] },
    ]);
  });

  it('429 with retry-after-ms once: one retryable assistant/attempt, two requests in all, then success', async () => {
    server.reply(
      an.error(429, 'rate_limit_error', 'Number of requests has exceeded your rate limit', { 'retry-after-ms': '5', 'retry-after': '0' }),
      an.textReply(['Hello', ' again.']),
    );
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

  it('an overloaded error event mid-stream is retried: partialOutput attempt logged, the retried stream starts a new message', async () => {
    server.reply(
      an.stream([an.start(), an.textStart(0), an.text(0, 'Hel'), an.streamError('overloaded_error', 'Overloaded')]),
      an.textReply(['Hello', ' world.']),
    );
    const { runtime, store } = setup({ config: { retryBackoffMs: 1 } });
    const { session, envelopes } = await openRecorded(runtime);
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });

    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Hello world.' });
    expect(server.requests).toHaveLength(2);
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'assistant/attempt').map((e) => e.payload)).toMatchObject([
      { attemptNumber: 1, error: { retryable: true, code: 'overloaded', partialOutput: true } },
    ]);
    expect(log.filter((e) => e.type === 'assistant/message').map((e) => (e.payload.message as { content: string }).content)).toEqual([
      'Hello world.',
    ]);
    // The broken attempt's deltas were already published; its message_end says they are
    // discarded, then the retry opens a new message_start with exactly the logged message.
    expectDiscardedThenRetried(envelopes, ['Hel'], ['Hello', ' world.']);
  });

  it('500 three times with maxProviderAttempts 3: failed with a ProviderError, three attempts, three requests', async () => {
    const err = () => an.error(500, 'api_error', 'Internal server error');
    server.reply(err(), err(), err());
    const { runtime, store } = setup({ config: { retryBackoffMs: 1, maxProviderAttempts: 3 } });
    const session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });

    expect(r).toMatchObject({ status: 'failed', outcome: 'failed', error: { kind: 'execution' } });
    expect(isProviderError(r.error!.cause)).toBe(true);
    expect(r.error!.cause).toMatchObject({ retryable: true, providerCode: 'server', status: 500 });
    expect(server.requests).toHaveLength(3);
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'assistant/attempt').map((a) => a.payload)).toMatchObject([
      { attemptNumber: 1, error: { retryable: true, code: 'server' } },
      { attemptNumber: 2, error: { retryable: true, code: 'server' } },
      { attemptNumber: 3, error: { retryable: true, code: 'server' } },
    ]);
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['failed']);
  });
});

/**
 * Engine ↔ Messages API mapping bugs. The local server accepts any body; the real API answers 400
 * ("tool_use ids were found without tool_result blocks immediately after"), so the run would fail
 * there with a non-retryable `ProviderError { code: 'bad_request' }`.
 */
describe('anthropicModel in a full run: every tool_use gets its tool_result', () => {
  // A rejected batch answers every call of the message: the bad ones with their error, the
  // valid ones as not run (the providers refuse a request with an unanswered tool call).
  it('a rejected batch with one valid and one unknown call answers every tool_use id', async () => {
    server.reply(
      an.stream([
        an.start(),
        ...toolBlock(0, 'toolu_a', ['{"city":', '"Paris"}']),
        an.toolStart(1, 'toolu_b', 'get_forecast'),
        an.json(1, '{}'),
        an.blockStop(1),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
      an.textReply(['ok']),
    );
    const { runtime, store, calls } = setup();
    const session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r.status).toBe('succeeded'); // only because the local server does not validate
    expect(calls).toEqual([]);
    const rejected = (await logOf(store, 's')).find((e) => e.type === 'tool/batch-rejected')!;
    expect((rejected.payload.issues as { callId: string }[]).map((i) => i.callId)).toEqual(['toolu_a', 'toolu_b']);

    const msgs = server.requests[1]!.body.messages as any[];
    expect(msgs[1].content.map((b: { id: string }) => b.id)).toEqual(['toolu_a', 'toolu_b']);
    const answered = (msgs[2].content as { type: string; tool_use_id?: string }[])
      .filter((b) => b.type === 'tool_result')
      .map((b) => b.tool_use_id);
    expect(answered.sort()).toEqual(['toolu_a', 'toolu_b']); // actual: ['toolu_b']
  });
});

describe('anthropicModel in a run: output caps', () => {
  it("keeps Anthropic's max_tokens above the thinking budget when the run's maxOutputTokens caps the call", async () => {
    server.reply(an.textReply(['ok']));
    const model = anthropicModel({
      client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }),
      model: 'claude-test',
      maxTokens: 8192,
      thinking: { type: 'enabled', budget_tokens: 4096 },
    });
    const { runtime } = lmdbRuntime({ model, budget: { maxOutputTokens: 2000 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    const body = server.requests[0]!.body as { max_tokens: number; thinking: { budget_tokens: number } };
    // the Messages API refuses a request whose max_tokens is not greater than thinking.budget_tokens
    expect(body.max_tokens).toBeGreaterThan(body.thinking.budget_tokens);
  });
});
