import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isCancelledError } from '../../src/contracts/errors.js';
import type { ModelProvider } from '../../src/contracts/model.js';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { oa, startOpenAIServer } from './openai-server.js';
import { callModel, failureOf, type ScriptedServer } from './sse-server.js';

/**
 * Second pass over the provider adapters with the real SDK clients against the local wire-format
 * servers. Every test here documents a bug (it fails against the current source).
 */

let oaServer: ScriptedServer;
let anServer: ScriptedServer;
beforeAll(async () => {
  oaServer = await startOpenAIServer();
  anServer = await startAnthropicServer();
});
afterAll(async () => {
  await oaServer.close();
  await anServer.close();
});
beforeEach(() => {
  oaServer.reset();
  anServer.reset();
});

// SDK default retries stay on in the client: only the adapter's per-request maxRetries: 0 applies.
const gpt = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: oaServer.baseURL, logLevel: 'off' }), model: 'gpt-test' });
const claude = () => anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anServer.baseURL, logLevel: 'off' }), model: 'claude-test' });

/** Calls `model`, aborting the signal from inside the first delta; returns the error and every text delta seen. */
async function abortOnFirstDelta(model: ModelProvider) {
  const ac = new AbortController();
  const seen: string[] = [];
  const error = await failureOf(
    model.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: ac.signal }, (e) => {
      if (e.type === 'text_delta') seen.push(e.text);
      ac.abort();
    }),
  );
  return { error, seen };
}

describe('openaiModel: compatible servers and broken streams', () => {
  it('keeps parallel tool calls apart when a compatible server (Gemini) omits tool_calls[].index', async () => {
    // Gemini's OpenAI-compatible endpoint streams each call whole, with its own id, and no `index`.
    oaServer.reply(
      oa.stream([
        oa.delta({ role: 'assistant', tool_calls: [{ id: 'function-call-1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }),
        oa.delta({ tool_calls: [{ id: 'function-call-2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }] }),
        oa.finish('stop'),
      ]),
    );
    const res = await callModel(gpt()).response;
    expect(res.finishReason).toBe('tool_calls');
    expect(res.message.toolCalls).toEqual([
      { id: 'function-call-1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { id: 'function-call-2', name: 'get_weather', arguments: '{"city":"Rome"}' },
    ]);
  });

  it('classifies an in-stream bad-request error chunk with a numeric code (vLLM / LiteLLM shape) as not retryable', async () => {
    oaServer.reply(
      oa.stream([
        oa.role(),
        { error: { object: 'error', message: "This model's maximum context length is 4096 tokens", type: 'BadRequestError', param: null, code: 400 } },
      ]),
    );
    const e = await failureOf(callModel(gpt()).response);
    expect(e).toMatchObject({ name: 'ProviderError', retryable: false, providerCode: 'bad_request' });
  });

  it('returns the response when the connection drops after finish_reason and the usage chunk (only [DONE] missing)', async () => {
    oaServer.reply(oa.stream([oa.role(), oa.text('Hello'), oa.finish('stop'), oa.usage(10, 2)], { cutAfter: 4 }));
    const res = await callModel(gpt()).response;
    expect(res).toMatchObject({ finishReason: 'stop', message: { content: 'Hello' }, usage: { inputTokens: 10, outputTokens: 2 } });
  });

  it('delivers no deltas to onEvent after the signal aborted between chunks', async () => {
    oaServer.reply(oa.textReply(['a', 'b', 'c']));
    const { error, seen } = await abortOnFirstDelta(gpt());
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toEqual(['a']);
  });
});

describe('anthropicModel: broken streams and aborts', () => {
  it('returns the response when the connection drops after message_stop', async () => {
    anServer.reply(
      an.stream([an.start(), an.textStart(0), an.text(0, 'Hello'), an.blockStop(0), an.messageDelta('end_turn', 2), an.stop()], { cutAfter: 6 }),
    );
    const res = await callModel(claude()).response;
    expect(res).toMatchObject({ finishReason: 'stop', message: { content: 'Hello' }, usage: { outputTokens: 2 } });
  });

  it('delivers no deltas to onEvent after the signal aborted between chunks', async () => {
    anServer.reply(an.textReply(['a', 'b', 'c']));
    const { error, seen } = await abortOnFirstDelta(claude());
    expect(isCancelledError(error)).toBe(true);
    expect(seen).toEqual(['a']);
  });
});
