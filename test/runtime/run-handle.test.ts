import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isExecutionBusy,
  isValidationError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type Envelope,
  type ModelProvider,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

// session.run: a one-line attempt whose handle streams text and envelopes and resolves the result.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A model that streams its answer in `chunks` (or not at all, when `stream` is false). */
function chunkedModel(answers: string[][], stream = true): ModelProvider {
  let i = 0;
  return {
    modelId: 'chunked',
    async call(_request, onEvent) {
      const chunks = answers[i++] ?? ['(none)'];
      if (stream) for (const c of chunks) onEvent({ type: 'text_delta', text: c });
      return { message: { role: 'assistant', content: chunks.join('') }, usage: { inputTokens: 1, outputTokens: 1 }, finishReason: 'stop' };
    },
  };
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const v of it) out.push(v);
  return out;
}

describe('session.run', () => {
  it('a string prompt streams its text deltas, then the result; run and attempt ids are generated', async () => {
    const runtime = createRuntime({ store: memoryStore(), model: chunkedModel([['Hel', 'lo, ', 'world']]) });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.run('hi');
    expect(run.runId).toMatch(/^[0-9a-f-]{36}$/);
    expect(run.attemptId).not.toBe(run.runId);
    expect(await collect(run.textStream)).toEqual(['Hel', 'lo, ', 'world']);
    const result = await run.result;
    expect(result).toMatchObject({ runId: run.runId, attemptId: run.attemptId, status: 'succeeded', finalMessage: 'Hello, world' });
  });

  it("events are the attempt's typed envelopes, from run_start to execution_finished", async () => {
    const add = defineTool({
      name: 'add',
      description: '',
      mode: 'parallel',
      parameters: z.object({ a: z.number(), b: z.number() }),
      execute: ({ a, b }) => a + b,
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 1, b: 2 } }] }, 'It is 3.']),
      tools: [add],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.run({ kind: 'prompt', runId: 'r1', message: 'add 1 and 2' });
    const events: Envelope[] = await collect(run.events);
    const types = events.map((e) => e.event.type);
    expect(types[0]).toBe('run_start');
    expect(types.at(-1)).toBe('execution_finished');
    expect(types).toContain('tool_start');
    const end = events.find((e) => e.event.type === 'tool_end')!.event;
    // the union narrows on `type`: no casts needed
    if (end.type === 'tool_end') expect(end.outcome).toMatchObject({ kind: 'completed', content: '3', structured: 3 });
    expect(events.every((e) => e.runId === 'r1' && e.attemptId === run.attemptId)).toBe(true);
    expect((await run.result).finalMessage).toBe('It is 3.');
  });

  it('a model call that does not stream still gives its text to textStream', async () => {
    const runtime = createRuntime({ store: memoryStore(), model: chunkedModel([['whole answer']], false) });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect(await collect(s.run('hi').textStream)).toEqual(['whole answer']);
  });

  it('a refused attempt rejects its result and throws from its iterables; bad input is a ValidationError', async () => {
    const gate = deferred<void>();
    const slow: ModelProvider = {
      modelId: 'slow',
      call: async () => (
        await gate.promise,
        { message: { role: 'assistant', content: 'ok' }, usage: { inputTokens: 1, outputTokens: 1 }, finishReason: 'stop' }
      ),
    };
    const runtime = createRuntime({ store: memoryStore(), model: slow });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const first = s.run('one');
    const second = s.run('two');
    await expect(second.result).rejects.toSatisfy(isExecutionBusy);
    await expect(collect(second.textStream)).rejects.toSatisfy(isExecutionBusy);
    await expect(collect(second.events)).rejects.toSatisfy(isExecutionBusy);
    expect(() => s.run({ kind: 'prompt', message: '' as unknown as never, runId: '' })).toThrow();
    try {
      s.run(42 as unknown as string);
      expect.unreachable('a number is not a run request');
    } catch (e) {
      expect(isValidationError(e)).toBe(true);
    }
    gate.resolve();
    expect((await first.result).status).toBe('succeeded');
  });

  it('session.run throws its ValidationError synchronously for ids the store cannot key, an image the model does not take, and bytes over contentLimits; nothing is logged', async () => {
    const pngOnly: ModelProvider = {
      modelId: 'png-only',
      contentSupport: { image: ['image/png'], file: [] },
      call: async () => ({ message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' }),
    };
    const store = memoryStore();
    const runtime = createRuntime({ store, model: pngOnly, contentLimits: { maxBlobBytes: 100 } });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const image = (mediaType: string, bytes: number) => [
      { role: 'user' as const, content: [{ type: 'image' as const, data: new Uint8Array(bytes), mediaType }] },
    ];
    const refused = [
      () => s.run({ kind: 'prompt', message: 'hi', runId: 'r'.repeat(2000) }),
      () => s.run({ kind: 'prompt', message: image('image/bmp', 10) }),
      () => s.run({ kind: 'prompt', message: image('image/png', 101) }),
      () =>
        s.run({
          kind: 'prompt',
          message: [{ role: 'user', content: [{ type: 'image', data: 'QUJD'.repeat(40), mediaType: 'image/png' }] }],
        }),
      // 101 bytes as Node decodes them (its padding after three characters): never counted short
      () =>
        s.run({
          kind: 'prompt',
          message: [{ role: 'user', content: [{ type: 'image', data: `${'QUJD'.repeat(33)}QUI==`, mediaType: 'image/png' }] }],
        }),
    ];
    for (const run of refused) {
      let thrown: unknown;
      try {
        run();
      } catch (e) {
        thrown = e;
      }
      expect(isValidationError(thrown), `${refused.indexOf(run)}: ${String(thrown)}`).toBe(true);
      expect((thrown as Error).message).toMatch(/^invalid input to session\.run/);
    }
    expect((await s.run({ kind: 'prompt', message: image('image/png', 100) }).result).status).toBe('succeeded');
    const runs = [];
    for await (const e of store.readEvents('s')) if (e.type === 'run/start') runs.push(e);
    expect(runs).toHaveLength(1);
  });

  it('execute continue and respond take the open run and a new attempt id when they leave them out', async () => {
    const pay = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'paid it']),
      tools: [pay],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r1 = await s.run('pay').result;
    expect(r1.status).toBe('suspended');
    const q = r1.pendingRequest!.questionId;
    const r2 = await s.execute({ kind: 'respond', questionId: q, answer: { decisions: { p1: 'approve' } } });
    expect(r2).toMatchObject({ runId: r1.runId, status: 'succeeded', finalMessage: 'paid it' });
    expect(r2.attemptId).not.toBe(r1.attemptId);
    // nothing open now: a continue without a run id has nothing to continue
    await expect(s.execute({ kind: 'continue' })).rejects.toSatisfy(isValidationError);
  });

  it("after a crash, run({ kind: 'continue' }) resumes the interrupted run with a fresh attempt each time", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const started = deferred();
    const slowTool = defineTool({
      name: 'wait',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (started.resolve(), new Promise<string>(() => {})),
    });
    const rt1 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'w1', name: 'wait', arguments: {} }] }]),
      tools: [slowTool],
    });
    const first = (await rt1.openSession('s')).run('go');
    await started.promise;
    const fast = defineTool({ name: 'wait', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'done' });
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel(['finished']), tools: [fast] });
    cleanups.push(() => rt2.close());
    const s2 = await rt2.openSession('s');
    const resumed = s2.run({ kind: 'continue' });
    expect(resumed.runId).toBe(first.runId);
    expect(await collect(resumed.textStream)).toEqual(['finished']);
    expect(await resumed.result).toMatchObject({
      runId: first.runId,
      status: 'succeeded',
      uncertainCalls: [{ callId: 'w1', resolution: 're-run' }],
    });
  });

  it('the ids option makes the generated run ids, of session.run and runtime.run alike', async () => {
    let n = 0;
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel(['a'], { loop: true }),
      ids: { instanceId: () => 'i', eventId: () => `e${++n}`, runId: () => `run-${++n}` },
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    for (const run of [s.run('hi'), runtime.run('hi again')]) {
      expect([run.runId, run.attemptId]).toEqual([expect.stringMatching(/^run-\d+$/), expect.stringMatching(/^run-\d+$/)]);
      expect((await run.result).status).toBe('succeeded');
    }
  });
});
