import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, defineTool, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';
import { an, startAnthropicServer } from '../providers/anthropic-server.js';
import type { ScriptedServer } from '../providers/sse-server.js';

/** Settles with 'timeout' when `p` has not settled within `ms`. */
const within = <T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> => Promise.race([p, sleep(ms).then(() => 'timeout' as const)]);

describe('tools: the built-in askUser name', () => {
  it('an app tool named askUser is executed like any tool when the askUser option is off', async () => {
    const seen: unknown[] = [];
    // the app's own tool that happens to carry the name (askUser option NOT enabled)
    const ask = defineTool({
      name: 'askUser', description: 'look something up in the user directory', mode: 'parallel',
      parameters: z.object({ userId: z.string() }),
      execute: (args) => (seen.push(args), 'user 7 is Ada'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'u1', name: 'askUser', arguments: { userId: '7' } }] }, 'Ada']);
    const { runtime } = lmdbRuntime({ model, tools: [ask] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'who is 7?' });
    expect(seen).toEqual([{ userId: '7' }]);
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Ada' });
  });

  it('askUser: true beside an app tool named askUser is refused, not silently replaced', () => {
    const mine = defineTool({ name: 'askUser', description: 'mine', parameters: z.object({ q: z.string() }), execute: () => 'x' });
    // DESIGN §6: tool names are unique; the app's tool silently disappearing is a conflict left unreported
    expect(() => lmdbRuntime({ model: scriptedModel(['hi']), tools: [mine], askUser: true })).toThrow(/askUser|unique/);
  });
});

describe('tools: arguments reach execute parsed, on every path', () => {
  it('an approved call gets the same parsed (transformed) arguments as an unapproved one', async () => {
    const got: { path: string; isDate: boolean; type: string }[] = [];
    const params = z.object({ at: z.string().transform((s) => new Date(s)) });
    const mk = (name: string, needsApproval: boolean) =>
      defineTool({
        name, description: '', parameters: params, needsApproval,
        execute: (args) => (got.push({ path: name, isDate: args.at instanceof Date, type: typeof args.at }), 'scheduled'),
      });
    const model = scriptedModel([
      { toolCalls: [{ id: 'p1', name: 'free', arguments: { at: '2030-01-01T00:00:00Z' } }] },
      { toolCalls: [{ id: 'p2', name: 'gated', arguments: { at: '2030-01-01T00:00:00Z' } }] },
      'done',
    ]);
    const { runtime } = lmdbRuntime({ model, tools: [mk('free', false), mk('gated', true)] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r.status).toBe('suspended');
    const r2 = await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { p2: 'approve' } } });
    expect(r2.status).toBe('succeeded');
    // without approval the tool sees a Date (zod's output); after approval it must see the same
    expect(got).toEqual([
      { path: 'free', isDate: true, type: 'object' },
      { path: 'gated', isDate: true, type: 'object' },
    ]);
  });
});

describe('tools: what execute may throw or return', () => {
  it('a tool rejecting with a null-prototype object still gets an error result (the run does not hang)', async () => {
    const odd = defineTool({
      name: 'odd', description: '', parameters: z.object({}),
      // e.g. an error object built with Object.create(null) by a parser / RPC library
      execute: async () => {
        throw Object.assign(Object.create(null), { code: 'E_ODD' });
      },
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'o1', name: 'odd', arguments: {} }] }, 'sorry']);
    const { runtime, store } = lmdbRuntime({ model, tools: [odd] });
    const s = await runtime.openSession('s');
    const r = await within(s.execute({ kind: 'prompt', ...ids(), message: 'go' }), 3000);
    // DESIGN §4.5: a throw becomes `completed` with isError: true
    expect(r).not.toBe('timeout');
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result');
    expect(result?.payload.outcome).toMatchObject({ kind: 'completed', isError: true });
  });

  it('a completed outcome whose `structured` is not JSON is recorded, not a failed run with the call unanswered', async () => {
    const ran: string[] = [];
    const lookup = defineTool({
      name: 'lookup', description: '', parameters: z.object({}),
      execute: () => (ran.push('x'), { kind: 'completed', content: 'row 1', structured: { id: 2n ** 70n } }),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'l1', name: 'lookup', arguments: {} }] }, 'found it']);
    const { runtime, store } = lmdbRuntime({ model, tools: [lookup] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toEqual(['x']);
    const log = await logOf(store, 's');
    // the tool ran (its effect happened): its result must be committed and the run go on
    const results = log.filter((e) => e.type === 'tool/result').length;
    // and the session's surface must not keep an assistant tool call without its result (the
    // providers refuse such a history with a 400 on every later request)
    await s.execute({ kind: 'prompt', ...ids(), message: 'again' });
    const sent = model.requests[1]!.messages;
    const answered = new Set(sent.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
    const unanswered = sent.flatMap((m) => m.toolCalls ?? []).filter((c) => !answered.has(c.id)).map((c) => c.id);
    expect({ status: r.status, results, unanswered }).toEqual({ status: 'succeeded', results: 1, unanswered: [] });
  });
});

describe('tools: ctx.emit', () => {
  it('an emit after the call has ended publishes no tool_update after its tool_end', async () => {
    let late: (() => void) | undefined;
    const t = defineTool({
      name: 't', description: '', mode: 'parallel', parameters: z.object({}),
      // e.g. a progress callback of a client library that fires once more after the call resolved
      execute: (_a, ctx) => ((late = () => ctx.emit({ progress: 100 })), 'ok'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 't1', name: 't', arguments: {} }] }, 'done']);
    const { runtime } = lmdbRuntime({ model, tools: [t] });
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.events$.subscribe((e) => void (e.event.type.startsWith('tool_') || e.event.type === 'execution_finished' ? seen.push(e.event.type) : undefined));
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    late!();
    await sleep(20);
    expect(seen).toEqual(['tool_start', 'tool_end', 'execution_finished']);
  });
});

describe('tools: the JSON Schema sent to the provider (real Anthropic SDK, local server)', () => {
  let server: ScriptedServer;
  beforeAll(async () => void (server = await startAnthropicServer()));
  afterAll(() => server.close());
  beforeEach(() => server.reset());
  const model = () => anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }), model: 'claude-test' });

  it('a tool whose parameters are not a z.object is refused, or sent with input_schema.type "object"', async () => {
    // a discriminated union of actions: a natural zod schema, but not an object at the top
    const params = z.discriminatedUnion('action', [
      z.object({ action: z.literal('open'), path: z.string() }),
      z.object({ action: z.literal('close'), path: z.string() }),
    ]);
    let tool;
    try {
      tool = defineTool({ name: 'file', description: 'open or close a file', parameters: params, execute: () => 'ok' });
    } catch {
      return; // refused at definition: fine
    }
    server.reply(an.textReply(['hi']));
    const { runtime } = lmdbRuntime({ model: model(), tools: [tool] });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    // the Messages API requires input_schema.type === "object" (400 otherwise); OpenAI likewise
    expect(server.lastBody().tools[0].input_schema.type).toBe('object');
  });

  it('a parameter JSON Schema cannot express (z.date()) is refused, not advertised as {} and then rejected on every call', async () => {
    const params = z.object({ when: z.date() });
    let tool;
    try {
      tool = defineTool({ name: 'remind', description: 'set a reminder', parameters: params, execute: () => 'set' });
    } catch {
      return; // refused at definition: fine
    }
    // the model follows the advertised schema (`when: {}` admits any value, here the usual ISO string)
    const call = an.stream([an.start(), an.toolStart(0, 'toolu_1', 'remind'), an.json(0, '{"when":"2030-01-01T09:00:00Z"}'), an.blockStop(0), an.messageDelta('tool_use'), an.stop()]);
    server.reply(call, call, call, an.textReply(['gave up']));
    const { runtime, store } = lmdbRuntime({ model: model(), tools: [tool] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'remind me' });
    expect(server.requests[0]!.body.tools[0].input_schema.properties.when).toEqual({});
    const rejected = (await logOf(store, 's')).filter((e) => e.type === 'tool/batch-rejected');
    // a call matching the schema the model was given must not be a protocol error
    expect({ rejected: rejected.length, status: r.status }).toEqual({ rejected: 0, status: 'succeeded' });
  });
});
