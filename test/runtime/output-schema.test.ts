import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineAgent, isValidationError, memoryStore, scriptedModel, type ValidationError } from '../../src/index.js';

// docs/typed-output.md, "What the runtime checks": an output schema with a part every answer must
// fill and no JSON value parses as could never accept an answer: refused by path before any model
// call. A part an answer can do without (a union's branch, optional, nullable, array items) is not.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('output schemas no answer could meet', () => {
  it('a required part no JSON parses as (a date, a bigint, a map, a set) is refused by path before any model call, nothing written', async () => {
    const model = scriptedModel(['{}']);
    const runtime = createRuntime({ store: memoryStore(), model });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const before = (await runtime.store.getHead('s'))?.lastSeq;
    const refused = await s
      .execute({
        kind: 'prompt',
        runId: 'r',
        attemptId: 'a',
        message: 'x',
        output: z.object({ when: z.date(), at: z.object({ n: z.bigint() }) }),
      })
      .catch((e: unknown) => e);
    expect(refused).toSatisfy(isValidationError);
    const issues = (refused as ValidationError).issues;
    expect(issues).toHaveLength(2);
    expect(issues).toEqual(
      expect.arrayContaining([
        { path: ['when'], message: expect.stringMatching(/^a date never comes out of JSON/) },
        { path: ['at', 'n'], message: expect.stringMatching(/^a bigint never comes out of JSON/) },
      ]),
    );
    expect(() =>
      createRuntime({
        store: memoryStore(),
        model,
        agents: [defineAgent({ name: 'mapper', instructions: 'm', output: z.object({ m: z.map(z.string(), z.string()) }) })],
      }),
    ).toThrow(/output of agent mapper.*m: a map never comes out of JSON/);
    expect(() => s.run('x', { output: z.object({ tags: z.set(z.string()) }) })).toThrow(
      /options\.output: tags: a set never comes out of JSON/,
    );
    expect(model.requests).toHaveLength(0);
    expect((await runtime.store.getHead('s'))?.lastSeq).toBe(before);
  });

  it('a part an answer can do without (a union branch, optional, nullable, array items) and a transform from a string are accepted, and answers meet them', async () => {
    const Out = z.object({
      when: z.union([z.string(), z.date()]),
      later: z.date().optional(),
      maybe: z.date().nullable(),
      dates: z.array(z.date()),
      size: z.string().transform((w) => w.length),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([JSON.stringify({ when: 'today', maybe: null, dates: [], size: 'four' })]),
    });
    cleanups.push(() => runtime.close());
    const r = await (await runtime.openSession('s')).run('x', { output: Out }).result;
    expect([r.status, r.output]).toEqual(['succeeded', { when: 'today', maybe: null, dates: [], size: 4 }]);
  });
});
