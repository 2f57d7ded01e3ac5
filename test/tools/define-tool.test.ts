import Anthropic from '@anthropic-ai/sdk';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  anthropicModel,
  createRuntime,
  defineTool,
  isValidationError,
  memoryStore,
  scriptedModel,
  ValidationError,
} from '../../src/index.js';
import { ids, lmdbRuntime, logOf, ofCall } from '../helpers/runtime.js';
import { an, startAnthropicServer } from '../providers/anthropic-server.js';
import type { ScriptedServer } from '../providers/sse-server.js';

// defineTool: options are checked when the tool is defined; the JSON Schema sent to the provider
// is one the provider accepts and the arguments can be checked against.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('defineTool options', () => {
  // src/streams/subscribers.ts already decides: "Unknown keys are rejected, so that a typo is not a
  // silent default." The other option objects strip them instead.
  it('defineTool with a misspelt needsApproval is refused', () => {
    expect(() =>
      defineTool({
        name: 'deploy',
        description: 'Deploys',
        parameters: z.object({}),
        needApproval: true, // typo of needsApproval
        execute: () => 'deployed',
      } as never),
    ).toThrow(ValidationError);
  });

  it('a timeoutMs or cancelGraceMs longer than Node.js can time is refused with a ValidationError', async () => {
    // Node.js runs a timer longer than 2^31−1 ms after 1 ms: such a timeout would abort the tool at once
    const slow = { name: 'slow', description: '', timeoutMs: 2 ** 31, parameters: z.object({}), execute: () => 'finished' };
    expect(() => defineTool(slow)).toThrow(ValidationError);
    expect(() => defineTool(slow)).toThrow(/2147483647/);
    expect(defineTool({ ...slow, timeoutMs: 2 ** 31 - 1 }).timeoutMs).toBe(2 ** 31 - 1);
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel(['x']), config: { cancelGraceMs: 2 ** 31 } })).toThrow(
      ValidationError,
    );
  });

  it('resource keys follow the id rule: an empty key, a NUL or a lone surrogate is refused naming resources; emoji and spaces are kept', () => {
    const tool = (resources: string[]) =>
      defineTool({ name: 'lock', description: '', parameters: z.object({}), resources, execute: () => 'x' });
    for (const bad of ['', 'a\u0000b', '\ud800', 'x\udc00y']) {
      expect(() => tool(['ok', bad]), JSON.stringify(bad)).toThrow(ValidationError);
      expect(() => tool(['ok', bad]), JSON.stringify(bad)).toThrow(/resources\.1/);
    }
    expect(tool(['room 🦊 é']).resources).toEqual(['room 🦊 é']);
  });

  it('a tool spread into defineTool is defined again with the new options: its spec recomputed, its execute kept', async () => {
    const add = defineTool({
      name: 'add',
      description: 'a + b',
      mode: 'parallel',
      parameters: z.object({ a: z.number(), b: z.number() }),
      execute: ({ a, b }) => String(a + b),
    });
    const renamed = defineTool({ ...add, name: 'plus', description: 'Adds two numbers', timeoutMs: 5_000 });
    expect(renamed.spec).toEqual({ ...add.spec, name: 'plus', description: 'Adds two numbers' });
    expect(renamed).toMatchObject({ name: 'plus', mode: 'parallel', timeoutMs: 5_000 });
    expect(renamed.resumable).toBeUndefined();
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'plus', arguments: { a: 2, b: 3 } }] }, 'five']),
      tools: [renamed],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect(await s.execute({ kind: 'prompt', ...ids(), message: '2 + 3?' })).toMatchObject({ status: 'succeeded' });
    expect(ofCall(await logOf(runtime.store, 's'), 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({ content: '5' });
  });

  it('resumable, list and revision are not options, in its type as at run time: only an agentTool or mcpTools makes such a tool', () => {
    const plain = { name: 'echo', description: '', parameters: z.object({}), execute: () => 'echo' };
    const refusedAt = (define: () => unknown): unknown => {
      try {
        define();
      } catch (e) {
        return isValidationError(e) ? e.issues.map((i) => i.path[0]) : e;
      }
      return 'accepted';
    };
    // @ts-expect-error resumable is not an option of defineTool
    expect(refusedAt(() => defineTool({ ...plain, resumable: true }))).toEqual(['resumable']);
    // @ts-expect-error list is not an option of defineTool
    expect(refusedAt(() => defineTool({ ...plain, list: { tools: () => [] } }))).toEqual(['list']);
    // @ts-expect-error revision is not an option of defineTool
    expect(refusedAt(() => defineTool({ ...plain, revision: () => 'r1' }))).toEqual(['revision']);
    // a defined tool spread with new options type-checks (its spec, and any mark it carries, go along)
    expect(defineTool({ ...defineTool(plain), timeoutMs: 5 }).timeoutMs).toBe(5);
  });
});

describe('the JSON Schema sent to the provider (real Anthropic SDK, local server)', () => {
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

  it('a parameter JSON Schema cannot express (z.date()) is refused when the tool is defined', async () => {
    const params = z.object({ when: z.date() });
    let tool;
    try {
      tool = defineTool({ name: 'remind', description: 'set a reminder', parameters: params, execute: () => 'set' });
    } catch {
      return; // refused at definition: fine
    }
    // the model follows the advertised schema (`when: {}` admits any value, here the usual ISO string)
    const call = an.stream([
      an.start(),
      an.toolStart(0, 'toolu_1', 'remind'),
      an.json(0, '{"when":"2030-01-01T09:00:00Z"}'),
      an.blockStop(0),
      an.messageDelta('tool_use'),
      an.stop(),
    ]);
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

describe("a tool's resources function", () => {
  it('one that returns anything but an array of resource keys (the id rule) fails the step as a throw would: the assistant message and skipped results are logged', async () => {
    for (const [given, said] of [
      [5, 'number'],
      [['a', 1], 'an array with a non-string key'],
      [{ length: 0 }, 'object'],
      [['a', ''], 'an array with the key "" (an empty string, or one with a NUL or a lone surrogate)'],
      [['a\u0000b'], 'an array with the key "a\\u0000b"'],
      [['\ud800'], 'an array with the key "\\ud800"'],
    ] as const) {
      const tool = defineTool({
        name: 'lock',
        description: 'Locks',
        parameters: z.object({}),
        resources: () => given as unknown as string[],
        execute: () => 'ran',
      });
      const store = memoryStore();
      const runtime = createRuntime({
        store,
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'lock', arguments: {} }] }, 'done']),
        tools: [tool],
      });
      const session = await runtime.openSession('s1');
      const r = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
      expect(r.status).toBe('failed');
      expect(r.error?.message).toContain(`the resources function of tool lock returned ${said}`);
      expect(r.error?.message).toContain('not an array of resource keys');
      const log: { type: string; payload: Record<string, unknown> }[] = [];
      for await (const e of store.readEvents('s1')) log.push(e);
      expect(log.map((e) => e.type)).toEqual([
        'session/attached',
        'run/start',
        'user/message',
        'step/start',
        'assistant/message',
        'tool/result',
        'step/end',
        'run/end',
      ]);
      expect(log.find((e) => e.type === 'tool/result')!.payload.outcome).toMatchObject({ kind: 'skipped' });
      await runtime.close();
    }
  });
});
