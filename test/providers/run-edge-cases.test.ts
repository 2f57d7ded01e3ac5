import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, openaiModel, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime } from '../helpers/runtime.js';
import { oa, startOpenAIServer } from './openai-server.js';
import type { ScriptedServer } from './sse-server.js';


let server: ScriptedServer;
beforeAll(async () => void (server = await startOpenAIServer()));
afterAll(() => server.close());
beforeEach(() => server.reset());

/** The real SDK client, with its default retries left on (the adapter must turn them off). */
const gpt = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' });

describe('run engine over a real provider client: edge cases', () => {
  it("caps each model call's output at the run's maxOutputTokens budget (docs/providers.md: run cap)", async () => {
    server.reply(oa.textReply(['ok']));
    const { runtime } = lmdbRuntime({ model: gpt(), tools: [], budget: { maxOutputTokens: 50 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(server.requests).toHaveLength(1);
    // the adapter lowers its cap to request.maxOutputTokens, but the runtime never sets it
    expect(server.requests[0]!.body.max_completion_tokens).toBeLessThanOrEqual(50);
  });

  it('does not turn an OpenAI refusal into a successful, empty final answer: the refusal text reaches the result', async () => {
    server.reply(oa.stream([oa.role(), oa.delta({ refusal: "I can't help with that." }), oa.finish('stop'), oa.usage(9, 4)]));
    const { runtime } = lmdbRuntime({ model: gpt(), tools: [] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    // the refusal is the model's answer: it becomes the final answer (the log keeps finishReason 'refusal')
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: "I can't help with that." });
  });

  it("an answer the provider's content filter removed entirely fails the run, named, instead of delivering an empty final", async () => {
    server.reply(oa.stream([oa.role(), oa.finish('content_filter'), oa.usage(9, 0)]));
    const delivered: string[] = [];
    const { runtime } = lmdbRuntime({ model: gpt(), tools: [], delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ status: 'failed', error: { kind: 'execution' } });
    expect(r.error!.message).toMatch(/content filter/);
    expect(delivered).toEqual([]);
  });

  it('scriptedModel gives tool calls ids unique within a run, also after a compaction shrank the messages', async () => {
    const keys: string[] = [];
    let n = 0;
    const t = defineTool({
      name: 't',
      description: '',
      parameters: z.object({}),
      mode: 'parallel',
      execute: (_a, ctx) => {
        keys.push(ctx.idempotencyKey);
        n++;
        return n === 3 ? 'y'.repeat(3200) : 'ok'; // the first call of run 2 returns a big result: compaction before its next step
      },
    });
    const call = { toolCalls: [{ name: 't', arguments: {} }] };
    const model = scriptedModel([
      { toolCalls: [{ name: 't', arguments: {} }, { name: 't', arguments: {} }] },
      'done one',
      call,
      'SUMMARY',
      call,
      call,
      'end',
    ]);
    const { runtime } = lmdbRuntime({ model, tools: [t], config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'x'.repeat(2000) });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    expect(model.requests.some((q) => q.messages[0]?.content.includes('Summarise'))).toBe(true); // a compaction happened
    // run 2 gets call_6_0, call_4_0, then call_6_0 again: the same idempotencyKey for two different calls
    const run2 = keys.slice(2);
    expect(new Set(run2).size).toBe(run2.length);
  });
});
