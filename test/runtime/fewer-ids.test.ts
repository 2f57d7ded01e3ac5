import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, lmdbStore, memoryStore, scriptedModel, type Runtime } from '../../src/index.js';
import { tempDir } from '../helpers/tmp.js';
import { expectValidation } from '../helpers/validation.js';

describe('fewer ids (docs/getting-started.md)', () => {
  it('openSession() without an id opens a new session under a fresh id', async () => {
    const rt = createRuntime({ model: scriptedModel(['a', 'b']), store: memoryStore() });
    const s1 = await rt.openSession();
    const s2 = await rt.openSession();
    expect(s1.sessionId).not.toBe(s2.sessionId);
    expect((await s1.run('hi').result).finalMessage).toBe('a');
    await rt.close();
  });

  it('runtime.run runs a prompt on a fresh session and hands back its sessionId', async () => {
    const rt = createRuntime({ model: scriptedModel(['hello there']), store: memoryStore() });
    const run = rt.run('hi');
    let text = '';
    for await (const t of run.textStream) text += t;
    const result = await run.result;
    expect(text).toBe('hello there');
    expect(result).toMatchObject({ runId: run.runId, attemptId: run.attemptId, status: 'succeeded' });
    expect(await rt.waitForResult(run.sessionId, run.runId)).toMatchObject({ finalMessage: 'hello there' });
    await rt.close();
  });

  it('runtime.run checks its call before it opens a session: a bad one throws a ValidationError and leaves no session in the store', async () => {
    const image = [{ role: 'user' as const, content: [{ type: 'image' as const, data: new Uint8Array(11), mediaType: 'image/png' }] }];
    const bad: [string, string, (rt: Runtime) => unknown][] = [
      ['an unknown option', 'outptu', (rt) => rt.run('hi', { outptu: z.string() } as never)],
      ['an output that is not a zod schema', 'output', (rt) => rt.run('hi', { output: 'text' } as never)],
      ['a NUL in the session id', 'sessionId', (rt) => rt.run('hi', { sessionId: 'a\u0000b' })],
      ['an empty session id', 'sessionId', (rt) => rt.run('hi', { sessionId: '' })],
      ['a system message as the prompt', 'role', (rt) => rt.run({ role: 'system', content: 'x' } as never)],
      ['no message', 'runtime.run', (rt) => rt.run(undefined as never)],
      ['an image over contentLimits', 'message', (rt) => rt.run(image)],
    ];
    for (const [name, makeStore] of [
      ['memory', () => ({ store: memoryStore(), cleanup: async () => {} })],
      [
        'lmdb',
        () => {
          const dir = tempDir();
          return { store: lmdbStore({ path: dir.path }), cleanup: () => dir.cleanup() };
        },
      ],
    ] as const) {
      const { store, cleanup } = makeStore();
      const rt = createRuntime({ model: scriptedModel(['never'], { loop: true }), store, contentLimits: { maxBlobBytes: 10 } });
      for (const [what, field, call] of bad) {
        await expectValidation(() => call(rt), field).catch((e: Error) => {
          throw new Error(`${name}, ${what}: ${e.message}`);
        });
        expect(await rt.store.listSessions(), `${name}, ${what}: no session`).toEqual([]);
      }
      // the runtime still runs a good call
      expect((await rt.run('hi', { sessionId: 'good' }).result).status).toBe('succeeded');
      expect(await rt.store.listSessions()).toEqual(['good']);
      await rt.close();
      await cleanup();
    }
  });

  it("runtime.run's prompt that the session's model refuses (an image it does not take) rejects its result and closes the session it opened", async () => {
    // which agent (and model) a named session runs is known once it is open: checked then
    const model = { ...scriptedModel(['never']), contentSupport: { image: ['image/jpeg'], file: [] } };
    const rt = createRuntime({ model, store: memoryStore() });
    const image = [{ role: 'user' as const, content: [{ type: 'image' as const, data: new Uint8Array(1), mediaType: 'image/png' }] }];
    const run = rt.run(image, { sessionId: 'named' });
    await expect(run.result).rejects.toMatchObject({ name: 'ValidationError' });
    // closed, not left open in this runtime: opening it again attaches a new instance
    await (await rt.openSession(run.sessionId)).close();
    const attached = [];
    for await (const e of rt.store.readEvents(run.sessionId)) if (e.type === 'session/attached') attached.push(e);
    expect(attached).toHaveLength(2);
    // a new session runs the default agent: its model's refusal is known before anything is opened
    expect(() => rt.run(image)).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    expect(await rt.store.listSessions()).toEqual(['named']);
    await rt.close();
  });

  it('a runtime given only its store submits a bare-string prompt and reads results; a run without a model is refused naming model', async () => {
    const dir = tempDir();
    const web = createRuntime({ store: lmdbStore({ path: dir.path }) });
    const receipt = await web.submit('s', 'what is 2 + 2?');
    expect(receipt).toMatchObject({ sessionId: 's', kind: 'input', status: 'accepted' });
    // starting a run needs a model
    const missingModel = { name: 'ValidationError', issues: [expect.objectContaining({ path: ['model'] })] };
    expect(() => web.run('hi')).toThrow(expect.objectContaining(missingModel));
    expect(() => web.serve()).toThrow(expect.objectContaining(missingModel));
    const s = await web.openSession('other');
    await expect(s.run('hi').result).rejects.toMatchObject(missingModel);
    await s.close();
    await web.close();
    // a worker with the model runs the submitted prompt: its run id is the receipt's entryId
    const worker = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel(['4']) });
    const served = worker.serve({ signal: AbortSignal.timeout(60_000) });
    expect(await worker.waitForResult('s', receipt.entryId, { signal: AbortSignal.timeout(60_000) })).toMatchObject({ finalMessage: '4' });
    await served.stop();
    await worker.close();
    await dir.cleanup();
  });

  it('createRuntime({}) is refused: a model, or a store given explicitly', () => {
    expect(() => createRuntime({})).toThrow(
      expect.objectContaining({ name: 'ValidationError', issues: [expect.objectContaining({ path: ['model'] })] }),
    );
  });
});
