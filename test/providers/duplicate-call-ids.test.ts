import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type ModelProvider } from '../../src/index.js';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { ids, lmdbRuntime, logOf } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { oa, startOpenAIServer } from './openai-server.js';
import type { ScriptedServer } from './sse-server.js';

/**
 * Parallel tool calls sharing one id (some compatible servers give every call of a message the
 * same id): each is its own call — run once, logged under its own id — and the next request names
 * every call once, as the providers require. Real SDK clients against the local wire servers.
 */

let openai: ScriptedServer;
let anthropic: ScriptedServer;
beforeAll(async () => {
  openai = await startOpenAIServer();
  anthropic = await startAnthropicServer();
});
afterAll(async () => {
  await openai.close();
  await anthropic.close();
});

function weather() {
  const cities: string[] = [];
  const tool = defineTool({
    name: 'get_weather',
    description: 'Current weather in a city',
    mode: 'parallel',
    parameters: z.object({ city: z.string() }),
    execute: ({ city }) => {
      cities.push(city);
      return `sunny in ${city}`;
    },
  });
  return { tool, cities };
}

async function runTwoCalls(model: ModelProvider) {
  const { tool, cities } = weather();
  const { runtime, store } = lmdbRuntime({ model, tools: [tool] });
  const session = await runtime.openSession('s');
  const r = await session.execute({ kind: 'prompt', ...ids(), message: 'Paris and Rome?' });
  const log = await logOf(store, 's');
  const results = log.filter((e) => e.type === 'tool/result').map((e) => e.payload as { callId: string; outcome: { kind: string } });
  return { r, cities, results, log };
}

describe('tool calls of one message that share an id', () => {
  it('Chat Completions: both calls run under distinct ids, and the next request pairs each call with its own result', async () => {
    openai.reset();
    openai.reply(
      oa.stream([
        oa.role(),
        oa.tool(0, '{"city":"Paris"}', { id: 'call_0', name: 'get_weather' }),
        oa.tool(1, '{"city":"Rome"}', { id: 'call_0', name: 'get_weather' }),
        oa.finish('tool_calls'),
        oa.usage(20, 10),
      ]),
      oa.textReply(['Sunny in both.'], 'stop', [40, 5, 0]),
    );
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' });
    const { r, cities, results } = await runTwoCalls(model);
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny in both.' });
    expect(cities.sort()).toEqual(['Paris', 'Rome']);
    expect(results.map((x) => [x.callId, x.outcome.kind])).toEqual([
      ['call_0', 'completed'],
      ['call_0_2', 'completed'],
    ]);
    const messages = openai.requests[1]!.body.messages as { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[];
    const callIds = messages.flatMap((m) => m.tool_calls?.map((c) => c.id) ?? []);
    expect(callIds).toEqual(['call_0', 'call_0_2']);
    expect(messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id)).toEqual(['call_0', 'call_0_2']);
  });

  it('Messages API: the same, each tool_use answered by one tool_result of its own id', async () => {
    anthropic.reset();
    anthropic.reply(
      an.stream([
        an.start(),
        an.toolStart(0, 'toolu_1', 'get_weather'),
        an.json(0, '{"city":"Paris"}'),
        an.blockStop(0),
        an.toolStart(1, 'toolu_1', 'get_weather'),
        an.json(1, '{"city":"Rome"}'),
        an.blockStop(1),
        an.messageDelta('tool_use', 12),
        an.stop(),
      ]),
      an.textReply(['Sunny in both.']),
    );
    const client = new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL });
    const { r, cities, results } = await runTwoCalls(anthropicModel({ client, model: 'claude-test', maxTokens: 1024 }));
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny in both.' });
    expect(cities.sort()).toEqual(['Paris', 'Rome']);
    expect(results.map((x) => x.callId)).toEqual(['toolu_1', 'toolu_1_2']);
    const messages = anthropic.requests[1]!.body.messages as {
      role: string;
      content: { type: string; id?: string; tool_use_id?: string }[];
    }[];
    const blocks = messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));
    expect(blocks.filter((b) => b.type === 'tool_use').map((b) => b.id)).toEqual(['toolu_1', 'toolu_1_2']);
    expect(blocks.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id)).toEqual(['toolu_1', 'toolu_1_2']);
  });
});
