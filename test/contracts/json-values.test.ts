import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isProviderError,
  isValidationError,
  memoryStore,
  scriptedModel,
  type ModelProvider,
} from '../../src/index.js';
import { jsonIssue, JsonValue, recordOf } from '../../src/contracts/json.js';
import { canonicalJson } from '../../src/persistence/codec.js';
import { backends } from '../helpers/backends.js';
import { logOf } from '../helpers/runtime.js';

/** Non-JSON input is a ValidationError at the boundary; a response that cannot be stored is a failed attempt. */

const cyclic = () => {
  const o: Record<string, unknown> = { a: 1 };
  o.self = o;
  return o;
};
const throwing = () => ({
  get boom(): string {
    throw new Error('getter says no');
  },
});

describe('jsonIssue: the one JSON-value check', () => {
  it.each([
    ['a cycle', { x: [cyclic()] }, ['x', 0, 'self'], /cycle/],
    ['a BigInt', { n: 1n }, ['n'], /BigInt/],
    ['a function', [() => 1], [0], /function/],
    ['a symbol value', { s: Symbol('x') }, ['s'], /symbol/],
    ['a symbol key', { [Symbol('k')]: 1 }, [], /symbol key/],
    ['NaN', { n: Number.NaN }, ['n'], /finite/],
    ['Infinity', [Infinity], [0], /finite/],
    ['undefined in an array', [1, undefined], [1], /undefined/],
    ['a hole', [1, , 3], [1], /hole/], // eslint-disable-line no-sparse-arrays
    ['a Date', { d: new Date(0) }, ['d'], /Date/],
    ['a Map', new Map(), [], /Map/],
    ['a class instance', { c: new (class Point {})() }, ['c'], /Point/],
    ['a throwing getter', { deep: throwing() }, ['deep', 'boom'], /getter says no/],
    [
      'a proxy whose ownKeys throws',
      new Proxy(
        {},
        {
          ownKeys: () => {
            throw new Error('no keys');
          },
        },
      ),
      [],
      /no keys/,
    ],
    ['undefined at the top', undefined, [], /undefined/],
  ])('%s is refused, naming where', (_what, value, path, message) => {
    const issue = jsonIssue(value);
    expect(issue?.path).toEqual(path);
    expect(issue?.message).toMatch(message);
  });

  it('nesting deeper than the limit is refused instead of exhausting the stack', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(jsonIssue(deep)?.message).toMatch(/deeper/);
  });

  it('JSON is accepted: shared (acyclic) references, undefined object properties, null-prototype objects, __proto__ keys', () => {
    const shared = { x: 1 };
    expect(jsonIssue({ a: shared, b: [shared, shared], c: undefined, d: Object.create(null), e: null, f: 'é', g: -0.5 })).toBeUndefined();
    const withProto = JSON.parse('{"__proto__":{"x":1}}');
    expect(jsonIssue(withProto)).toBeUndefined();
    // kept, unlike z.json(), which drops the key
    expect(Object.hasOwn(JsonValue.parse(withProto) as object, '__proto__')).toBe(true);
  });

  it('recordOf keeps a __proto__ key as an entry and reads no inherited one', () => {
    const r = recordOf(z.enum(['approve', 'deny'])).parse(JSON.parse('{"__proto__":"approve","constructor":"deny"}'));
    expect(Object.entries(r).sort()).toEqual([
      ['__proto__', 'approve'],
      ['constructor', 'deny'],
    ]);
    expect(r.toString).toBeUndefined();
    expect(() => recordOf(z.string()).parse({ a: 1 })).toThrow();
  });

  it('canonicalJson refuses a cycle or a BigInt with a ValidationError (not a stack overflow or a TypeError)', () => {
    expect(() => canonicalJson({ a: cyclic() })).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    expect(() => canonicalJson([1n])).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    expect(canonicalJson({ b: 1, a: [true, null] })).toBe('{"a":[true,null],"b":1}');
  });
});

const expectValidation = async (p: Promise<unknown> | (() => unknown), path?: (string | number)[]) => {
  let err: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    err = e;
  }
  expect(isValidationError(err), `expected a ValidationError, got ${String(err)}`).toBe(true);
  if (path) expect(JSON.stringify((err as { issues: unknown }).issues)).toContain(JSON.stringify(path).slice(1, -1));
};

describe('non-JSON public input is a ValidationError at the boundary, with nothing written', () => {
  it("createRuntime: bootstrap messages' providerData with a cycle or a BigInt", async () => {
    for (const providerData of [cyclic(), { n: 2n }, { f: () => 1 }, throwing()]) {
      await expectValidation(() =>
        createRuntime({
          store: memoryStore(),
          model: scriptedModel([]),
          bootstrapMessages: [{ role: 'user', content: 'x', providerData }],
        }),
      );
    }
  });

  it.each(['memory', 'lmdb'] as const)('prompts, inputs, answers, state and checkpoints (%s store)', async (kind) => {
    const ask = defineTool({ name: 'ask', description: '', needsApproval: true, parameters: z.object({}), execute: () => 'ok' });
    const rt = backends[kind]().rt({
      model: scriptedModel([
        { toolCalls: [{ id: 'c1', name: 'ask', arguments: {} }] },
        'asked',
        { toolCalls: [{ id: 'q1', name: 'askUser', arguments: { question: 'why?' } }] },
        'thanks',
      ]),
      tools: [ask],
      askUser: true,
    });
    const s = await rt.openSession('s');
    const before = (await logOf(rt.store, 's')).length;
    const prompt = (providerData: unknown) =>
      s.execute({ kind: 'prompt', runId: 'p', attemptId: 'p', message: { role: 'user', content: 'hi', providerData } as never });
    await expectValidation(prompt(cyclic()), ['message']);
    await expectValidation(prompt({ n: 1n }));
    await expectValidation(
      s.execute({
        kind: 'prompt',
        runId: 'p',
        attemptId: 'p',
        message: [{ role: 'user', content: 'hi', providerData: { s: Symbol('x') } }] as never,
      }),
    );
    await expectValidation(
      s.submitInput({ inputId: 'i', mode: 'follow_up', message: { role: 'user', content: 'x', providerData: cyclic() } }),
    );
    await expectValidation(s.setStateContext(cyclic()));
    await expectValidation(s.setStateContext({ n: 10n }));
    await expectValidation(s.loadCheckpoint({ messages: [], stateContext: cyclic() }));
    await expectValidation(s.loadCheckpoint({ messages: [{ role: 'user', content: 'x', providerData: { d: new Date() } }] }));
    expect((await logOf(rt.store, 's')).length).toBe(before);
    // an approval answered with a cycle or a BigInt
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    const q = r.pendingRequest!.questionId;
    const answer = { decisions: { c1: 'approve' }, extra: cyclic() };
    await expectValidation(s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer }), ['answer']);
    await expectValidation(
      s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { decisions: { c1: 'approve' }, n: 1n } }),
    );
    expect(
      await s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: q, answer: { decisions: { c1: 'approve' } } }),
    ).toMatchObject({ status: 'succeeded' });
    // a question answered with a cycle, then with JSON
    const r2 = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'ask me' });
    expect(r2.pendingRequest).toMatchObject({ kind: 'question' });
    await expectValidation(
      s.execute({ kind: 'respond', runId: 'r2', attemptId: 'b2', questionId: r2.pendingRequest!.questionId, answer: [cyclic()] }),
      ['answer', 0, 'self'],
    );
    expect(
      await s.execute({ kind: 'respond', runId: 'r2', attemptId: 'b2', questionId: r2.pendingRequest!.questionId, answer: 'because' }),
    ).toMatchObject({ status: 'succeeded' });
  });
});

describe('a provider response the log cannot hold is a failed attempt (ProviderError invalid_response, logged)', () => {
  const provider = (providerData: () => unknown): ModelProvider => ({
    modelId: 'custom',
    call: async () => ({ message: { role: 'assistant', content: 'hi', providerData: providerData() as never }, finishReason: 'stop' }),
  });

  it.each([
    ['a BigInt', () => ({ n: 1n })],
    ['a cycle', cyclic],
    ['a throwing getter', throwing],
    ['a Date', () => ({ at: new Date() })],
  ])('providerData with %s', async (_what, data) => {
    const rt = backends.memory().rt({ model: provider(data), config: { maxProviderAttempts: 2, retryBackoffMs: 1 } });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'hi' });
    expect(r).toMatchObject({ status: 'failed' });
    expect(isProviderError(r.error?.cause)).toBe(true);
    expect(r.error?.cause).toMatchObject({ providerCode: 'invalid_response', retryable: false });
    const log = await logOf(rt.store, 's');
    expect(log.filter((e) => e.type === 'assistant/attempt').map((e) => (e.payload.error as { code?: string }).code)).toEqual([
      'invalid_response',
    ]);
    expect(log.at(-1)!.type).toBe('run/end');
  });
});

describe("a tool outcome's structured data must be JSON", () => {
  it.each([
    ['a cycle', cyclic],
    ['a BigInt', () => ({ n: 1n })],
    ['a Map', () => new Map([[1, 2]])],
  ])('structured with %s becomes an error result the model reads; the run goes on', async (_what, structured) => {
    const t = defineTool({
      name: 't',
      description: '',
      parameters: z.object({}),
      execute: () => ({ kind: 'completed' as const, content: 'x', structured: structured() }),
    });
    const rt = backends.memory().rt({ model: scriptedModel([{ toolCalls: [{ id: 'c', name: 't', arguments: {} }] }, 'ok']), tools: [t] });
    const s = await rt.openSession('s');
    expect(await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' })).toMatchObject({ status: 'succeeded' });
    const result = (await logOf(rt.store, 's')).find((e) => e.type === 'tool/result')!;
    expect(result.payload.outcome).toMatchObject({ kind: 'completed', isError: true, content: expect.stringContaining('invalid outcome') });
  });
});
