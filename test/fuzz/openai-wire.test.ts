import fc from 'fast-check';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, openaiModel } from '../../src/index.js';
import { oa, startOpenAIServer } from '../providers/openai-server.js';
import type { Reply, ScriptedServer } from '../providers/sse-server.js';
import { answerUntilSettled, argumentText, decisionPicker, fuzzTools, toolName } from './arbitraries.js';
import { bounded, expectLogInvariants, expectResult, fuzz, hostileKey, propertyTimeout, settlesTyped } from './fuzz-lib.js';

/**
 * Generated model output over the OpenAI Chat Completions wire: the real `openai` client against
 * the local server, with generated call ids, names, argument text split into generated chunks,
 * finish reasons (known and not), with or without the usage chunk and `[DONE]`.
 */

let server: ScriptedServer;
beforeAll(async () => void (server = await startOpenAIServer()));
afterAll(() => server.close());

/** Cuts `s` at the given fractions (sorted, deduplicated): the pieces a stream delivers it in. */
function split(s: string, cuts: number[]): string[] {
  const at = [...new Set(cuts.map((c) => Math.floor(c * s.length)))].sort((a, b) => a - b);
  const out: string[] = [];
  let prev = 0;
  for (const i of [...at, s.length]) {
    if (i > prev || (i === s.length && out.length === 0)) out.push(s.slice(prev, i));
    prev = Math.max(prev, i);
  }
  return out;
}

const wireCall = fc.record({
  id: hostileKey,
  name: toolName,
  args: argumentText,
  cuts: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 4 }),
});

const wireReply = fc.record({
  text: fc.array(fc.string({ maxLength: 10 }), { maxLength: 3 }),
  calls: fc.array(wireCall, { maxLength: 3 }),
  finish: fc.oneof(fc.constantFrom('stop', 'tool_calls', 'length', 'content_filter', 'function_call'), fc.string({ maxLength: 8 })),
  usage: fc.boolean(),
  done: fc.boolean(),
  /** Gemini-style: every call whole in one chunk with no index. */
  noIndex: fc.boolean(),
});

type WireReply = typeof wireReply extends fc.Arbitrary<infer T> ? T : never;

function toReply(r: WireReply): Reply {
  const chunks: unknown[] = [oa.role(), ...r.text.map(oa.text)];
  r.calls.forEach((c, i) => {
    if (r.noIndex) {
      chunks.push(oa.delta({ tool_calls: [{ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } }] }));
      return;
    }
    split(c.args, c.cuts).forEach((piece, k) => chunks.push(oa.tool(i, piece, k === 0 ? { id: c.id, name: c.name } : undefined)));
  });
  chunks.push(oa.finish(r.finish));
  if (r.usage) chunks.push(oa.usage(10, 5));
  return oa.stream(chunks, { done: r.done });
}

describe('fuzz: model output over the OpenAI wire', () => {
  it('every generated stream settles with a result, keeping the log invariants', { timeout: propertyTimeout() }, async () => {
    await fuzz(
      'model-output/openai-wire',
      fc.record({ replies: fc.array(wireReply, { minLength: 1, maxLength: 3 }), pick: decisionPicker }),
      async ({ replies, pick }) => {
        server.reset();
        server.reply(...replies.map(toReply), oa.textReply(['final']), oa.textReply(['again']), oa.textReply(['and again']));
        const store = memoryStore();
        const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' });
        const runtime = createRuntime({
          store,
          model,
          tools: fuzzTools([]),
          askUser: true,
          config: { maxProviderAttempts: 2, retryBackoffMs: 1 },
          budget: { maxSteps: 5 },
        });
        try {
          const s = await runtime.openSession('s');
          const first = await settlesTyped(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), 'prompt');
          expect(first.error, `prompt rejected: ${first.error?.message}`).toBeUndefined();
          expectResult(first.value);
          const r = await bounded(answerUntilSettled(s, first.value!, pick, 'an answer'), 'answers');
          expectResult(r);
          await expectLogInvariants(store, 's', r.status !== 'suspended' ? ['r'] : []);
        } finally {
          await bounded(runtime.close(), 'close');
        }
      },
    );
  });
});
