import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, isOutputValidationError, isProviderError, openaiModel, openaiResponsesModel } from '../../src/index.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbRuntime } from '../helpers/runtime.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import { providerServers } from './provider-servers.js';

/**
 * A model's refusal under an output schema (docs/typed-output.md, "Refusals"): the run fails at
 * once with a ProviderError `refusal` carrying the refusal's text — no correction is asked for, no
 * "the answer is not JSON". Without a schema the refusal's text is the answer, as before. Each
 * wire's refusal through the real SDK client: Chat `delta.refusal`, Responses
 * `response.refusal.delta`, Anthropic `stop_reason: 'refusal'`.
 */
const { openai, anthropic, responses } = providerServers();

const REFUSAL = "I can't help with that.";
const Invoice = z.object({ number: z.string(), total: z.number() });
const refusalItem = {
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  status: 'completed',
  content: [{ type: 'refusal', refusal: REFUSAL }],
};

const wires = [
  {
    name: 'Chat Completions delta.refusal',
    server: () => openai,
    model: () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' }),
    refusal: () =>
      oa.stream([
        oa.role(),
        oa.delta({ refusal: "I can't" }),
        oa.delta({ refusal: ' help with that.' }),
        oa.finish('stop'),
        oa.usage(9, 4),
      ]),
  },
  {
    name: 'Responses response.refusal.delta',
    server: () => responses,
    model: () => openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: responses.baseURL }), model: 'gpt-test' }),
    refusal: () => rs.stream([rs.created(), rs.refusal(0, 'msg_1', REFUSAL), rs.done(0, refusalItem), rs.completed([refusalItem])]),
  },
  {
    name: "Anthropic stop_reason 'refusal'",
    server: () => anthropic,
    model: () => anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test' }),
    refusal: () => an.textReply([REFUSAL], 'refusal'),
  },
];

async function typesOf(store: EventStore, sessionId: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of store.readEvents(sessionId)) out.push(e.type);
  return out;
}

/** The usage the log's assistant messages carry, summed. */
async function loggedUsage(store: EventStore, sessionId: string): Promise<{ inputTokens: number; outputTokens: number }> {
  const sum = { inputTokens: 0, outputTokens: 0 };
  for await (const e of store.readEvents(sessionId)) {
    const usage = e.type === 'assistant/message' ? (e.payload as { usage?: typeof sum }).usage : undefined;
    if (usage) (sum.inputTokens += usage.inputTokens), (sum.outputTokens += usage.outputTokens);
  }
  return sum;
}

describe('a refusal under an output schema', () => {
  it.each(wires)('$name: the run fails at once, by name, with the refusal text; no correction is asked for', async (w) => {
    w.server().reply(w.refusal(), w.refusal(), w.refusal());
    const { runtime, store } = lmdbRuntime({ model: w.model() });
    const s = await runtime.openSession('s');
    const r = await s.run('Extract INV-7', { output: Invoice }).result;
    expect(r.status).toBe('failed');
    expect(w.server().requests).toHaveLength(1);
    const cause = r.error?.cause;
    expect(isProviderError(cause) && cause.providerCode).toBe('refusal');
    expect(isProviderError(cause) && cause.retryable).toBe(false);
    expect(isOutputValidationError(cause)).toBe(false);
    expect(r.error?.message).toContain(`the model refused to answer: ${REFUSAL}`);
    const types = await typesOf(store, 's');
    expect(types).toContain('assistant/message');
    expect(types).not.toContain('verification/rejected');
  });

  it.each(wires)("$name: the failed run's usage counts the refused call, as its log does", async (w) => {
    w.server().reply(w.refusal());
    const { runtime, store } = lmdbRuntime({ model: w.model() });
    const r = await (await runtime.openSession('s')).run('Extract INV-7', { output: Invoice }).result;
    expect(r.status).toBe('failed');
    const logged = await loggedUsage(store, 's');
    expect(logged.outputTokens).toBeGreaterThan(0);
    expect(r.usage).toMatchObject(logged);
  });
});

describe('a refusal without an output schema', () => {
  it.each(wires)("$name: the refusal's text is the answer", async (w) => {
    w.server().reply(w.refusal());
    const { runtime } = lmdbRuntime({ model: w.model() });
    const r = await (await runtime.openSession('s')).run('Extract INV-7').result;
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: REFUSAL });
    expect(w.server().requests).toHaveLength(1);
  });
});
