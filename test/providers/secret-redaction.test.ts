import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { anthropicModel, openaiModel, openaiResponsesModel, type ModelProvider } from '../../src/index.js';
import { redactSecrets } from '../../src/providers/redact.js';
import { ids, lmdbRuntime, logOf } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { startOpenAIServer } from './openai-server.js';
import { rs } from './responses-server.js';
import type { ScriptedServer } from './sse-server.js';

/**
 * A provider's error text can echo the API key (a proxy quoting the request, "invalid key sk-…"):
 * what the log keeps of a failed call — `assistant/attempt` and `run/end` — never holds the
 * client's key or an `Authorization` / `api-key` / `x-api-key` header value. Real SDK clients over
 * HTTP to the local wire-format servers, a real LMDB store.
 */
const KEY = 'sk-test-Zq81hD0c2d7Pq4Lx9Rr3';
const OTHER_TOKEN = 'tok-9f8e7d6c5b4a39281706';

let openaiServer: ScriptedServer;
let anthropicServer: ScriptedServer;
beforeAll(async () => {
  openaiServer = await startOpenAIServer();
  anthropicServer = await startAnthropicServer();
});
afterAll(async () => {
  await openaiServer.close();
  await anthropicServer.close();
});
beforeEach(() => {
  openaiServer.reset();
  anthropicServer.reset();
});

const echo = `Incorrect API key provided: ${KEY}. Request headers: {"Authorization":"Bearer ${KEY}","x-api-key":"${OTHER_TOKEN}"}, api-key=${OTHER_TOKEN}`;

async function runFailing(model: ModelProvider): Promise<string> {
  const { runtime, store } = lmdbRuntime({ model });
  const session = await runtime.openSession('s');
  const r = await session.execute({ kind: 'prompt', ...ids(), message: 'hi' });
  expect(r.status).toBe('failed');
  const log = await logOf(store, 's');
  const logged = JSON.stringify(log.filter((e) => e.type === 'assistant/attempt' || e.type === 'run/end'));
  expect(log.map((e) => e.type)).toContain('assistant/attempt');
  expect(log.map((e) => e.type)).toContain('run/end');
  return logged;
}

describe('secrets in provider errors', () => {
  it('openai: the key and header values echoed by a 401 are redacted in assistant/attempt and run/end', async () => {
    openaiServer.reply({
      kind: 'status',
      status: 401,
      body: { error: { message: echo, type: 'invalid_request_error', code: 'invalid_api_key' } },
    });
    const logged = await runFailing(openaiModel({ client: new OpenAI({ apiKey: KEY, baseURL: openaiServer.baseURL }), model: 'gpt-test' }));
    expect(logged).not.toContain(KEY);
    expect(logged).not.toContain(OTHER_TOKEN);
    expect(logged).toContain('[redacted]');
    expect(logged).toMatch(/Incorrect API key provided/); // the rest of the message is kept
  });

  it('openai responses: the same for a 401 and for a failed response in the stream that echoes the key', async () => {
    const model = () => openaiResponsesModel({ client: new OpenAI({ apiKey: KEY, baseURL: openaiServer.baseURL }), model: 'gpt-test' });
    openaiServer.reply(rs.httpError(401, echo, 'invalid_request_error'));
    const http = await runFailing(model());
    openaiServer.reply(rs.stream([rs.created(), rs.failed('invalid_prompt', echo)]));
    const inStream = await runFailing(model());
    for (const logged of [http, inStream]) {
      expect(logged).not.toContain(KEY);
      expect(logged).not.toContain(OTHER_TOKEN);
      expect(logged).toContain('[redacted]');
    }
    expect(inStream).toMatch(/Incorrect API key provided/);
  });

  it('anthropic: the same for an error body that echoes the key', async () => {
    anthropicServer.reply(an.error(401, 'authentication_error', echo));
    const logged = await runFailing(
      anthropicModel({ client: new Anthropic({ apiKey: KEY, baseURL: anthropicServer.baseURL }), model: 'claude-test', maxTokens: 100 }),
    );
    expect(logged).not.toContain(KEY);
    expect(logged).not.toContain(OTHER_TOKEN);
    expect(logged).toContain('[redacted]');
  });

  it('a custom provider whose error quotes header values gets them redacted too (its key is not known: the header patterns apply)', async () => {
    const model: ModelProvider = {
      modelId: 'custom',
      call: async () => {
        throw new Error(`upstream said 403 for Authorization: Bearer ${OTHER_TOKEN}`);
      },
    };
    const logged = await runFailing(model);
    expect(logged).not.toContain(OTHER_TOKEN);
    expect(logged).toContain('Authorization: Bearer [redacted]');
  });

  it('redactSecrets keeps names and separators, replaces values', () => {
    expect(redactSecrets(`key ${KEY} and again ${KEY}`, [KEY])).toBe('key [redacted] and again [redacted]');
    expect(redactSecrets('{"api-key": "abcdef123456"}')).toBe('{"api-key": "[redacted]"}');
    expect(redactSecrets('X-Api-Key=abcdef123456; next')).toBe('X-Api-Key=[redacted]; next');
    expect(redactSecrets('authorization: Basic dXNlcjpwYXNzd29yZA==')).toBe('authorization: Basic [redacted]');
    expect(redactSecrets('nothing secret here', ['short'])).toBe('nothing secret here');
  });
});
