import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { openaiResponsesModel } from '../../src/providers/openai-responses.js';
import { parseResetDuration } from '../../src/providers/rate-headers.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { oa, startOpenAIServer } from './openai-server.js';
import { rs, startResponsesServer } from './responses-server.js';
import { callModel, failureOf, type Reply, type ScriptedServer } from './sse-server.js';

const servers: { openai?: ScriptedServer; responses?: ScriptedServer; anthropic?: ScriptedServer } = {};
beforeAll(async () => {
  servers.openai = await startOpenAIServer();
  servers.responses = await startResponsesServer();
  servers.anthropic = await startAnthropicServer();
});
afterAll(async () => {
  for (const s of Object.values(servers)) await s.close();
});
beforeEach(() => {
  for (const s of Object.values(servers)) s.reset();
});

const withHeaders = (reply: Reply, headers: Record<string, string>): Reply => ({ ...reply, headers }) as Reply;

const OPENAI_HEADERS = {
  'x-ratelimit-limit-requests': '500',
  'x-ratelimit-limit-tokens': '30000',
  'x-ratelimit-remaining-requests': '499',
  'x-ratelimit-remaining-tokens': '0',
  'x-ratelimit-reset-requests': '120ms',
  'x-ratelimit-reset-tokens': '6m0s',
};
const OPENAI_LIMITS = { requests: { remaining: 499, resetMs: 120 }, tokens: { remaining: 0, resetMs: 360_000 } };

describe("the providers' rate headers", () => {
  it('reads OpenAI reset durations: hours, minutes, seconds and ms, fractions included; anything else is unreadable', () => {
    expect(parseResetDuration('6m0s')).toBe(360_000);
    expect(parseResetDuration('1s')).toBe(1_000);
    expect(parseResetDuration('20ms')).toBe(20);
    expect(parseResetDuration('1h2m3.5s')).toBe(3_723_500);
    expect(parseResetDuration('0.5s')).toBe(500);
    for (const bad of ['', 'soon', '5', '1d', '-1s', '1s later']) expect(parseResetDuration(bad)).toBeUndefined();
  });

  it('openaiModel (Chat Completions, the openai SDK over HTTP) puts them on the response as providerLimits', async () => {
    servers.openai!.reply(withHeaders(oa.textReply(['hi']), OPENAI_HEADERS));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: servers.openai!.baseURL }), model: 'gpt-test' });
    const res = await callModel(model).response;
    expect(res.message.content).toBe('hi');
    expect(res.providerLimits).toEqual(OPENAI_LIMITS);
  });

  it('openaiResponsesModel puts them on the response as providerLimits', async () => {
    servers.responses!.reply(withHeaders(rs.textReply(['hi']), OPENAI_HEADERS));
    const model = openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: servers.responses!.baseURL }), model: 'gpt-test' });
    expect((await callModel(model).response).providerLimits).toEqual(OPENAI_LIMITS);
  });

  it("openaiModel puts a 429's rate headers on its ProviderError, beside retry-after", async () => {
    servers.openai!.reply(oa.error(429, 'Rate limit reached for tokens', 'tokens', { ...OPENAI_HEADERS, 'retry-after': '3' }));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: servers.openai!.baseURL }), model: 'gpt-test' });
    const e = await failureOf(callModel(model).response);
    expect(e).toMatchObject({ providerCode: 'rate_limit', retryAfterMs: 3_000, providerLimits: OPENAI_LIMITS });
  });

  it('anthropicModel (the @anthropic-ai/sdk over HTTP) reads requests, input, output and combined tokens, resets as RFC 3339 times', async () => {
    const at = (ms: number) => new Date(Date.now() + ms).toISOString();
    servers.anthropic!.reply(
      withHeaders(an.textReply(['hi']), {
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-requests-remaining': '0',
        'anthropic-ratelimit-requests-reset': at(30_000),
        'anthropic-ratelimit-input-tokens-remaining': '1200',
        'anthropic-ratelimit-input-tokens-reset': at(2_000),
        'anthropic-ratelimit-output-tokens-remaining': '800',
        'anthropic-ratelimit-tokens-remaining': '2000',
        'anthropic-ratelimit-tokens-reset': 'not a time',
      }),
    );
    const model = anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: servers.anthropic!.baseURL }), model: 'claude-test' });
    const limits = (await callModel(model).response).providerLimits!;
    expect(limits.requests?.remaining).toBe(0);
    expect(limits.requests?.resetMs).toBeGreaterThan(25_000);
    expect(limits.requests?.resetMs).toBeLessThanOrEqual(30_000);
    expect(limits.inputTokens?.remaining).toBe(1200);
    expect(limits.inputTokens?.resetMs).toBeLessThanOrEqual(2_000);
    expect(limits.outputTokens).toEqual({ remaining: 800 });
    expect(limits.tokens).toEqual({ remaining: 2000 }); // its unreadable reset left out
  });

  it("anthropicModel puts a 429's rate headers on its ProviderError, beside retry-after", async () => {
    servers.anthropic!.reply(
      an.error(429, 'rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit', {
        'retry-after': '7',
        'anthropic-ratelimit-input-tokens-remaining': '0',
        'anthropic-ratelimit-input-tokens-reset': new Date(Date.now() + 7_000).toISOString(),
      }),
    );
    const model = anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: servers.anthropic!.baseURL }), model: 'claude-test' });
    const e = await failureOf(callModel(model).response);
    expect(e).toMatchObject({ providerCode: 'rate_limit', retryAfterMs: 7_000, providerLimits: { inputTokens: { remaining: 0 } } });
    expect(e.providerLimits.inputTokens.resetMs).toBeGreaterThan(5_000);
  });

  it('leaves providerLimits out of a response without rate headers', async () => {
    servers.openai!.reply(oa.textReply(['hi']));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: servers.openai!.baseURL }), model: 'gpt-test' });
    expect((await callModel(model).response).providerLimits).toBeUndefined();
  });
});
