import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { openaiResponsesModel } from '../../src/providers/openai-responses.js';
import { ERROR_TEXT_MAX } from '../../src/providers/provider-errors.js';
import { ids, lmdbRuntime, logOf } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { startOpenAIServer } from './openai-server.js';
import { startResponsesServer } from './responses-server.js';
import { callModel, failureOf, type ScriptedServer } from './sse-server.js';

let server: ScriptedServer;
let openai: ScriptedServer;
beforeAll(async () => {
  server = await startAnthropicServer();
  openai = await startOpenAIServer();
});
afterAll(async () => {
  await server.close();
  await openai.close();
});
beforeEach(() => {
  server.reset();
  openai.reset();
});

const model = (apiKey = 'test') => anthropicModel({ client: new Anthropic({ apiKey, baseURL: server.baseURL }), model: 'claude-test' });

describe("an Anthropic error reads as the API's message, not its JSON body", () => {
  it('an HTTP error: the status and error.message, classified as before', async () => {
    server.reply(an.error(400, 'invalid_request_error', 'prompt is too long: 210000 tokens > 200000 maximum'));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', status: 400, providerCode: 'bad_request', retryable: false });
    expect((e as Error).message).toBe('anthropic: 400 prompt is too long: 210000 tokens > 200000 maximum');
  });

  it('an error event in the stream: its error.message, classified by its type', async () => {
    server.reply(an.stream([an.start(), an.streamError('overloaded_error', 'Overloaded')]));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ providerCode: 'overloaded', retryable: true });
    expect((e as Error).message).toBe('anthropic: error in stream: Overloaded');
  });

  it("the message is redacted, and a body without a message keeps the SDK's text", async () => {
    const key = 'sk-ant-secret-key-0123456789';
    server.reply(an.error(401, 'authentication_error', `invalid x-api-key ${key}`));
    const e = await failureOf(callModel(model(key)).response);
    expect((e as Error).message).toMatch(/^anthropic: 401 invalid x-api-key /);
    expect((e as Error).message).not.toContain(key);
    server.reply({ kind: 'status', status: 500, body: { type: 'error', error: { type: 'api_error' } } });
    const bare = await failureOf(callModel(model()).response);
    expect(bare).toMatchObject({ providerCode: 'server' });
    expect((bare as Error).message).toBe('anthropic: 500 {"type":"error","error":{"type":"api_error"}}');
  });
});

describe('an error message stays brief, in the error and in the log', () => {
  const page = `<!DOCTYPE html><html><head><title>api.openai.com | 502: Bad gateway</title><style>${'x{}'.repeat(2_500)}</style></head><body>${'<p>cloudflare</p>'.repeat(200)}</body></html>`;

  it("a gateway's HTML error page is its title: in the error, each failed attempt's record and the run's end", async () => {
    openai.reply(...Array.from({ length: 3 }, () => ({ kind: 'status' as const, status: 502, body: page })));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' });
    const { runtime, store } = lmdbRuntime({ model, config: { maxProviderAttempts: 3, retryBackoffMs: 1 } });
    const session = await runtime.openSession('s');
    const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r.status).toBe('failed');
    expect(r.error?.message).toContain('502 api.openai.com | 502: Bad gateway (an HTML page)');
    expect(r.error?.message).not.toContain('<');
    const log = await logOf(store, 's');
    const attempts = log.filter((e) => e.type === 'assistant/attempt');
    expect(attempts).toHaveLength(3);
    for (const a of attempts) expect(JSON.stringify(a.payload).length).toBeLessThan(2_000);
    expect(JSON.stringify(log.find((e) => e.type === 'run/end')!.payload).length).toBeLessThan(4_000);
  });

  it('a long error text is cut at ERROR_TEXT_MAX characters, saying how many more there were', async () => {
    server.reply(an.error(400, 'invalid_request_error', `bad: ${'y'.repeat(5_000)}`));
    const e = await failureOf(
      callModel(anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }), model: 'claude-test' })).response,
    );
    const text = (e as Error).message;
    expect(text.startsWith('anthropic: 400 bad: yyy')).toBe(true);
    expect(text).toMatch(/… \(\d+ more characters\)$/);
    expect(text.length).toBeLessThan(ERROR_TEXT_MAX + 60);
  });
});

describe('a 200 answer with a JSON error body instead of a stream (some gateways) is that error, by its type', () => {
  const notFound = { error: { message: 'The model `gpt-x` does not exist', type: 'invalid_request_error', code: 'model_not_found' } };
  const body200 = (body: unknown) => ({ kind: 'status' as const, status: 200, body });

  it('OpenAI Chat Completions and Responses: the error message, not retried as a broken stream', async () => {
    const responses = await startResponsesServer();
    try {
      const client = (baseURL: string) => new OpenAI({ apiKey: 'test', baseURL });
      for (const [srv, model, name] of [
        [openai, openaiModel({ client: client(openai.baseURL), model: 'gpt-x' }), 'openai'],
        [responses, openaiResponsesModel({ client: client(responses.baseURL), model: 'gpt-x' }), 'openai-responses'],
      ] as const) {
        srv.reply(body200(notFound));
        const e = await failureOf(callModel(model).response);
        expect(e).toMatchObject({ name: 'ProviderError', retryable: false, providerCode: 'bad_request' });
        expect((e as Error).message).toBe(`${name}: a JSON answer where a stream was expected: The model \`gpt-x\` does not exist`);
        expect(srv.requests).toHaveLength(1);
      }
    } finally {
      await responses.close();
    }
  });

  it('Anthropic: its error.message and type; a JSON body without an error is a bad answer, retried', async () => {
    server.reply(body200({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }));
    const e = await failureOf(callModel(model()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: true, providerCode: 'overloaded' });
    expect((e as Error).message).toBe('anthropic: a JSON answer where a stream was expected: Overloaded');
    server.reply(body200({ hello: 'world' }));
    const odd = await failureOf(callModel(model()).response);
    expect(odd).toMatchObject({ name: 'ProviderError', retryable: true, providerCode: 'bad_response' });
    expect((odd as Error).message).toBe('anthropic: a JSON answer where a stream was expected: {"hello":"world"}');
  });
});
