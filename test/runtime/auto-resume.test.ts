import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type RuntimeOptions } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

const hang = () => new Promise<string>(() => {});

/**
 * A session whose run `r` is interrupted inside an exclusive call `m1` (its intent logged, no
 * result): the first runtime is abandoned mid-call, as a killed process leaves its log. The
 * second runtime (`model` scripted) opens the same LMDB file.
 */
async function interrupted(second: Omit<RuntimeOptions, 'store'>) {
  const dir = tempDir();
  const started = deferred();
  const send = (execute: () => Promise<string> | string) =>
    defineTool({ name: 'send', description: '', parameters: z.object({}), execute });
  const rt1 = createRuntime({
    store: lmdbStore({ path: dir.path }),
    model: scriptedModel([{ toolCalls: [{ id: 'm1', name: 'send', arguments: {} }] }]),
    tools: [send(() => (started.resolve(), hang()))],
  });
  void (await rt1.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'send it' });
  await started.promise;
  const rt2 = createRuntime({ tools: [send(() => 'sent again')], ...second, store: lmdbStore({ path: dir.path }) });
  return {
    rt2,
    done: async () => {
      await rt2.close();
      await dir.cleanup();
    },
  };
}

const recoveredR = {
  runId: 'r',
  outcome: 'completed',
  status: 'succeeded',
  uncertainCalls: [{ callId: 'm1', name: 'send', resolution: 'uncertain-hanging' }],
};

describe('resume by default (docs/recovery.md)', () => {
  it('a new prompt over an interrupted run first continues it, then runs, and its result reports what recovery found', async () => {
    const { rt2, done } = await interrupted({ model: scriptedModel(['settled the old run', 'the new answer']) });
    const s = await rt2.openSession('s');
    // not at open: the run is still interrupted until a run starts
    expect(s.snapshot().status).toBe('detached');
    const run = s.run('and now this');
    let text = '';
    for await (const t of run.textStream) text += t;
    const result = await run.result;
    expect(text).toBe('the new answer');
    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'the new answer', recovered: recoveredR });
    expect(result.recovered!.deliveredFinalIds).toHaveLength(1);
    // the recorded result says the same (waitForResult reads it from the log)
    expect((await rt2.waitForResult('s', result.runId)).recovered).toMatchObject(recoveredR);
    // the interrupted run settled with its own answer, never re-running the exclusive call
    expect(
      s
        .snapshot()
        .messages.filter((m) => m.role === 'assistant' && typeof m.content === 'string' && m.content !== '')
        .map((m) => m.content),
    ).toEqual(['settled the old run', 'the new answer']);
    // only the first new run reports it
    expect((await s.run('again').result).recovered).toBeUndefined();
    await done();
  });

  it("resume: 'manual' keeps ExecutionBusy('interrupted') for a new prompt; the app's continue is the report, not the next run's recovered", async () => {
    const { rt2, done } = await interrupted({ model: scriptedModel(['x', 'y']) });
    const s = await rt2.openSession('s', { resume: 'manual' });
    await expect(s.run('other').result).rejects.toMatchObject({ name: 'ExecutionBusy', state: 'interrupted', activeRunId: 'r' });
    // an explicit continue right after opening is the resume, with its uncertain calls
    expect(await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({
      status: 'succeeded',
      uncertainCalls: [{ callId: 'm1', resolution: 'uncertain-hanging' }],
    });
    const next = await s.run('other').result;
    expect(next).toMatchObject({ status: 'succeeded', finalMessage: 'y' });
    expect(next.recovered).toBeUndefined();
    await done();
  });

  it('a submitted input over an interrupted run runs after the run is continued, and reports the recovery', async () => {
    const { rt2, done } = await interrupted({ model: scriptedModel(['settled the old run', 'the input answered']) });
    await rt2.openSession('s');
    const { entryId } = await rt2.submit('s', 'a follow-up');
    const result = await rt2.waitForResult('s', entryId, { signal: AbortSignal.timeout(60_000) });
    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'the input answered', recovered: recoveredR });
    await done();
  });

  it('under serve, a submitted input over an interrupted run runs after the worker continued it, and reports the recovery', async () => {
    const { rt2, done } = await interrupted({ model: scriptedModel(['settled the old run', 'the input answered']) });
    const { entryId } = await rt2.submit('s', 'a follow-up');
    const worker = rt2.serve({ leaseMs: 60_000 });
    const result = await rt2.waitForResult('s', entryId, { signal: AbortSignal.timeout(60_000) });
    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'the input answered', recovered: recoveredR });
    await worker.stop();
    await done();
  });

  it('a suspended run is not interrupted: a new prompt stays refused with ExecutionBusy(suspended)', async () => {
    const dir = tempDir();
    const rt = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'pay', arguments: {} }] }]),
      tools: [defineTool({ name: 'pay', description: '', parameters: z.object({}), execute: () => 'paid' })],
      approvalFor: ['pay'],
    });
    const s = await rt.openSession('s');
    expect((await s.run('pay').result).status).toBe('suspended');
    await expect(s.run('other').result).rejects.toMatchObject({ name: 'ExecutionBusy', state: 'suspended' });
    await rt.close();
    await dir.cleanup();
  });
});

describe('the same prompt executed again over its interrupted run (guarantees.md, session.execute)', () => {
  it('runs nothing: before a continue it is the attempt detached, after one the run settled result; nothing resumes for it', async () => {
    const model = scriptedModel(['settled by the continue']);
    const { rt2, done } = await interrupted({ model });
    const s = await rt2.openSession('s');
    const again = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'send it' });
    expect(again).toMatchObject({ runId: 'r', attemptId: 'a1', status: 'detached' });
    expect(model.requests).toHaveLength(0); // the interrupted run was not continued for it
    expect(s.snapshot().status).toBe('detached');
    const continued = await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(continued.status).toBe('succeeded');
    const later = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'send it' });
    expect(later).toMatchObject({ runId: 'r', status: 'succeeded', finalMessage: 'settled by the continue' });
    expect(model.requests).toHaveLength(1);
    await done();
  });

  it('an attempt detached in this process, executed again, is its recorded result and continues nothing; once a continue settled the run, that result', async () => {
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await new Promise((r) => setTimeout(r, 200)), 'ok'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'final answer']);
    const dir = tempDir();
    const rt = createRuntime({ store: lmdbStore({ path: dir.path }), model, tools: [slow] });
    const s = await rt.openSession('s');
    const first = s.run({ kind: 'prompt', runId: 'R', attemptId: 'A', message: 'go' });
    await started.promise;
    s.requestDetach();
    expect((await first.result).status).toBe('detached');
    const again = await s.execute({ kind: 'prompt', runId: 'R', attemptId: 'A', message: 'go' });
    expect(again).toMatchObject({ runId: 'R', attemptId: 'A', status: 'detached' });
    expect(model.requests).toHaveLength(1); // no continue made a model call for it
    expect((await s.execute({ kind: 'continue', runId: 'R', attemptId: 'B' })).status).toBe('succeeded');
    expect(await s.execute({ kind: 'prompt', runId: 'R', attemptId: 'A', message: 'go' })).toMatchObject({
      status: 'succeeded',
      finalMessage: 'final answer',
    });
    await rt.close();
    await dir.cleanup();
  });
});
