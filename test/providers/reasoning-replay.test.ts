import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Reply } from './sse-server.js';
import { anthropicModel, defineTool, lmdbStore, openaiResponsesModel, type ModelProvider } from '../../src/index.js';
import { lmdbPath } from '../helpers/lmdb-path.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { rs, startResponsesServer } from './responses-server.js';
import type { ScriptedServer } from './sse-server.js';

/**
 * A model's reasoning (OpenAI Responses reasoning items with their encrypted content, Anthropic
 * signed thinking and redacted_thinking blocks) must be sent back unchanged, before the tool calls
 * it led to, on the step after them — also when that step runs in a new process: the first
 * runtime is closed while the step-2 model call is under way, a new runtime opens the same LMDB
 * file and continues the run, and its step-2 request is built from the log alone.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let openai: ScriptedServer;
let anthropic: ScriptedServer;
beforeAll(async () => {
  openai = await startResponsesServer();
  anthropic = await startAnthropicServer();
});
afterAll(async () => {
  await openai.close();
  await anthropic.close();
});

const weather = () =>
  defineTool({
    name: 'get_weather',
    description: 'Current weather in a city',
    mode: 'parallel',
    parameters: z.object({ city: z.string() }),
    execute: (args) => `sunny in ${args.city}`,
  });

/** A reply the server holds back (no headers) until the client hangs up: the step-2 call under way at the "crash". */
const held: Reply = { kind: 'sse', events: [], headersDelayMs: 30_000 };

/**
 * Runs a prompt on a first runtime until the server has received its step-2 request, closes that
 * runtime (the process ends mid-call), opens a second runtime on the same LMDB file and continues
 * the run; the server answers the continued step-2 call with `final`. Returns the continued result
 * and the step-1 assistant/message as logged.
 */
async function runAcrossRestart(server: ScriptedServer, model: () => ModelProvider, step1: Reply, final: Reply) {
  server.reset();
  const db = lmdbPath(cleanups);
  server.reply(step1, held);
  const rt1 = db.rt({ model: model(), tools: [weather()], systemPrompt: 'Be brief.' });
  const s1 = await rt1.openSession('s');
  const first = s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'Weather in Paris?' });
  for (let i = 0; i < 2500 && server.requests.length < 2; i++) await sleep(20);
  expect(server.requests).toHaveLength(2);
  await rt1.close();
  expect(await first).toMatchObject({ status: 'detached' });

  server.reply(final);
  const rt2 = db.rt({ model: model(), tools: [weather()], systemPrompt: 'Be brief.' });
  const s2 = await rt2.openSession('s');
  expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r' }]);
  const result = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
  const logged = (await logOf(readerOf(db.path), 's')).find((e) => e.type === 'assistant/message');
  return { result, logged: logged?.payload as { message: Record<string, unknown>; usage?: Record<string, unknown> } };
}

/** A second LMDB handle on the file, closed after the test. */
function readerOf(path: string) {
  const store = lmdbStore({ path });
  cleanups.push(() => store.close());
  return store;
}

describe('reasoning sent back across steps and a restart', () => {
  it('OpenAI Responses: the encrypted reasoning item and the function_call are sent again, in order, by the continued run', async () => {
    const reasoning = rs.reasoning('rs_1', 'gAAAAB-encrypted-reasoning==', ['The user wants Paris.']);
    const call = rs.call('fc_1', 'call_1', 'get_weather', '{"city":"Paris"}');
    const model = () => openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'o4-mini' });
    const { result, logged } = await runAcrossRestart(openai, model, rs.reasoningCallReply(reasoning, call), rs.textReply(['Sunny.']));

    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny.' });
    expect(logged.message).toMatchObject({ providerData: { openaiResponses: { output: [reasoning, call] } } });
    expect(logged.usage).toMatchObject({ reasoningTokens: 20 });
    const step2 = [
      { type: 'message', role: 'system', content: 'Be brief.' },
      { type: 'message', role: 'user', content: 'Weather in Paris?' },
      reasoning,
      call,
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny in Paris' },
    ];
    expect(openai.requests).toHaveLength(3);
    expect(openai.requests[1]!.body.input).toEqual(step2); // the next step, in the first process
    expect(openai.requests[2]!.body.input).toEqual(step2); // the same step after the restart, from the log
    expect(openai.requests[2]!.body).toMatchObject({ store: false, include: ['reasoning.encrypted_content'] });
  });

  it('Anthropic: signed thinking and redacted_thinking blocks come first, unchanged, before tool_use, in the continued run', async () => {
    const thinking = {
      type: 'thinking',
      thinking: 'The user wants Paris.',
      signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=',
    };
    const redacted = { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP==' };
    const step1 = an.stream([
      an.start(),
      an.thinkingStart(0),
      an.thinking(0, 'The user wants Paris.'),
      an.signature(0, thinking.signature),
      an.blockStop(0),
      an.blockStart(1, redacted),
      an.blockStop(1),
      an.toolStart(2, 'toolu_1', 'get_weather'),
      an.json(2, '{"city":'),
      an.json(2, '"Paris"}'),
      an.blockStop(2),
      an.messageDelta('tool_use'),
      an.stop(),
    ]);
    const model = () =>
      anthropicModel({
        client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }),
        model: 'claude-test',
        thinking: { type: 'enabled', budget_tokens: 1024 },
      });
    const { result } = await runAcrossRestart(anthropic, model, step1, an.textReply(['Sunny.']));

    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'Sunny.' });
    const step2 = [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      {
        role: 'assistant',
        content: [thinking, redacted, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny in Paris' }] },
    ];
    expect(anthropic.requests).toHaveLength(3);
    expect(anthropic.requests[1]!.body.messages).toEqual(step2);
    expect(anthropic.requests[2]!.body.messages).toEqual(step2);
    expect(anthropic.requests[2]!.body.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
  });
});
