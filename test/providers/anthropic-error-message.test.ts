import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { callModel, failureOf, type ScriptedServer } from './sse-server.js';

let server: ScriptedServer;
beforeAll(async () => void (server = await startAnthropicServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());

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
