import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { anthropicModel, openaiModel, openaiResponsesModel, scriptedModel, type ModelProvider } from '../../src/index.js';
import { ids, lmdbRuntime, logOf } from '../helpers/runtime.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import type { Reply, ScriptedServer } from './sse-server.js';
import { providerServers } from './provider-servers.js';

/**
 * An answer the output token limit cut before any text (a reasoning model that spent the whole
 * limit thinking: Chat `finish_reason: 'length'` with no content, Responses `response.incomplete`
 * with only a reasoning item, Anthropic `max_tokens` with only a thinking block) is no answer: the
 * run fails, named, instead of delivering an empty final answer as `succeeded`.
 */
const { openai, anthropic, responses } = providerServers();

const client = (baseURL: string) => new OpenAI({ apiKey: 'test', baseURL });
const wires: [string, () => ModelProvider, ScriptedServer | undefined, Reply | undefined][] = [];
beforeAll(() => {
  wires.push(
    [
      'Chat Completions',
      () => openaiModel({ client: client(openai.baseURL), model: 'o-test' }),
      openai,
      oa.stream([oa.role(), oa.finish('length'), oa.usage(9, 64, 0, 64)]),
    ],
    [
      'Responses',
      () => openaiResponsesModel({ client: client(responses.baseURL), model: 'o-test' }),
      responses,
      rs.stream([rs.created(), rs.incomplete('max_output_tokens', [rs.reasoning('rs_1', 'enc')], rs.usage(9, 64, 0, 64))]),
    ],
    [
      'Anthropic',
      () => anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test', maxTokens: 64 }),
      anthropic,
      an.stream([
        an.start(),
        an.thinkingStart(0),
        an.thinking(0, 'Let me think'),
        an.blockStop(0),
        an.messageDelta('max_tokens', 64),
        an.stop(),
      ]),
    ],
    [
      'scriptedModel',
      () => scriptedModel([{ text: '', finishReason: 'length', usage: { inputTokens: 9, outputTokens: 64 } }]),
      undefined,
      undefined,
    ],
  );
});

describe('an answer the output token limit cut before any text fails the run, named', () => {
  it('on every wire: failed, not retried, no final delivered; the call and its usage logged', async () => {
    for (const [name, model, server, reply] of wires) {
      if (server && reply) server.reply(reply);
      const delivered: string[] = [];
      const { runtime, store } = lmdbRuntime({ model: model(), delivery: { deliver: async (f) => void delivered.push(f.content) } });
      const s = await runtime.openSession('s');
      const r = await s.execute({ kind: 'prompt', ...ids(), message: 'think hard' });
      expect(r, name).toMatchObject({ status: 'failed', error: { kind: 'execution' } });
      expect(r.error!.message, name).toMatch(/output token limit before writing any answer/);
      expect(r.usage.outputTokens, name).toBe(64);
      expect(delivered, name).toEqual([]);
      if (server) expect(server.requests, name).toHaveLength(1);
      const log = await logOf(store, 's');
      expect(
        log.filter((e) => e.type === 'final/message'),
        name,
      ).toEqual([]);
      await runtime.close();
    }
  });

  it('a cut answer with text is still delivered as written', async () => {
    const model = scriptedModel([{ text: 'The answer is', finishReason: 'length' }]);
    const { runtime } = lmdbRuntime({ model });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'The answer is' });
    await runtime.close();
  });
});
