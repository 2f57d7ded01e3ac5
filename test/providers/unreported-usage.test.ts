import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, defineTool, openaiModel, openaiResponsesModel, type ModelProvider } from '../../src/index.js';
import { foldRunEvents } from '../../src/persistence/open-run.js';
import { ids, lmdbRuntime, logOf } from '../helpers/runtime.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import { startSseServer, type Reply, type ScriptedServer } from './sse-server.js';

// docs/guarantees.md, "Budgets": a call whose usage never came back counts at its reservation,
// never at zero — also an answer that arrived whole from a provider (or a proxy) that sent no usage.

let server: ScriptedServer;
beforeAll(async () => void (server = await startSseServer('/v1')));
afterAll(() => server.close());
beforeEach(() => server.reset());

const echo = defineTool({ name: 'echo', description: 'echo', mode: 'parallel', parameters: z.object({}), execute: () => 'x' });

/** Per provider: its model over the real SDK client, and a reply calling `echo` with no usage in it. */
const providers: { name: string; model: () => ModelProvider; toolCallWithoutUsage: () => Reply }[] = [
  {
    name: 'Chat Completions (no usage chunk)',
    model: () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' }),
    toolCallWithoutUsage: () => oa.stream([oa.role(), oa.tool(0, '{}', { id: 'call_1', name: 'echo' }), oa.finish('tool_calls')]),
  },
  {
    name: 'Responses (usage: null)',
    model: () => openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' }),
    toolCallWithoutUsage: () => {
      const call = rs.call('fc_1', 'call_1', 'echo', '{}');
      return rs.stream([rs.created(), rs.added(0, call), rs.argsDone(0, 'fc_1', '{}'), rs.done(0, call), rs.completed([call], null)]);
    },
  },
  {
    name: 'Anthropic Messages (no usage fields)',
    model: () =>
      anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }), model: 'claude-test', maxTokens: 400 }),
    toolCallWithoutUsage: () => {
      const start = an.start();
      delete (start.message as { usage?: unknown }).usage;
      const { usage: _usage, ...end } = an.messageDelta('tool_use');
      return an.stream([start, an.toolStart(0, 'toolu_1', 'echo'), an.json(0, '{}'), an.blockStop(0), end, an.stop()]);
    },
  },
];

describe('a call whose provider reported no usage', () => {
  for (const p of providers) {
    it(`counts at its reservation in the run's budget, never at zero: ${p.name}`, async () => {
      for (let i = 0; i < 5; i++) server.reply(p.toolCallWithoutUsage());
      const { runtime, store } = lmdbRuntime({
        model: p.model(),
        tools: [echo],
        budget: { maxOutputTokens: 1000, maxSteps: 10 },
        config: { outputReserve: 400 },
      });
      const session = await runtime.openSession('s');
      const r = await session.execute({ kind: 'prompt', ...ids(), message: 'go' });
      // 400 + 400 + 200 (what is left) counted: no fourth call fits
      expect(server.requests.length).toBe(3);
      expect(r).toMatchObject({
        status: 'budget_exhausted',
        budget: 'maxOutputTokens',
        spending: { maxOutputTokens: { limit: '1000', spent: '0', reserved: '1000', remaining: '0' } },
      });
      const log = await logOf(store, 's');
      const messages = log.filter((e) => e.type === 'assistant/message').map((e) => e.payload as Record<string, unknown>);
      expect(messages.map((m) => [m.usage, m.counted, (m.reserved as { outputTokens: number }).outputTokens])).toEqual([
        [undefined, 'reservation', 400],
        [undefined, 'reservation', 400],
        [undefined, 'reservation', 200],
      ]);
      // a recovery reads the same count back from the log
      expect(foldRunEvents(log)?.spent.reservations.map((x) => x.outputTokens)).toEqual([400, 400, 200]);
    });
  }
});
