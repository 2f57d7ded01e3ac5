import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type RuntimeOptions } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * In-process stand-ins for a crash: the runtime is abandoned mid-run (never closed), so its log
 * ends exactly where a killed process's would; a second runtime then opens the same LMDB path.
 * (The SIGKILL torture test in test/crash does the same with real processes.)
 */
function twoLives(dir: string, first: Omit<RuntimeOptions, 'store'>, second: Omit<RuntimeOptions, 'store'>) {
  const rt1 = createRuntime({ ...first, store: lmdbStore({ path: dir }) });
  const open2 = () => createRuntime({ ...second, store: lmdbStore({ path: dir }) });
  return { rt1, open2 };
}

const hang = () => new Promise<string>(() => {});

describe('recovery after an interruption', () => {
  it('the result that settles a recovered run lists every call left uncertain by a crash, whichever process resolved it', async () => {
    const dir = tempDir();
    const started = deferred();
    const lookupStarted = deferred();
    const charge = (execute: () => Promise<string> | string) =>
      defineTool({ name: 'charge', description: '', parameters: z.object({ n: z.number() }), resources: ['card'], execute });
    const lookup = (execute: () => Promise<string> | string) =>
      defineTool({ name: 'lookup', description: '', mode: 'parallel', parameters: z.object({}), execute });
    // life 1 dies in charge (exclusive); life 2 records it uncertain, then dies in lookup
    // (parallel); life 3 runs lookup again and settles the run
    const rt1 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'charge', arguments: { n: 5 } }] }]),
      tools: [charge(() => (started.resolve(), hang())), lookup(hang)],
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'charge 5' });
    await started.promise;
    const rt2 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'l1', name: 'lookup', arguments: {} }] }]),
      tools: [charge(() => 'charged'), lookup(() => (lookupStarted.resolve(), hang()))],
    });
    const s2 = await rt2.openSession('s');
    void s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    await lookupStarted.promise;
    const rt3 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel(['I could not confirm the charge.']),
      tools: [charge(() => 'charged'), lookup(() => 'found')],
    });
    const s3 = await rt3.openSession('s');
    // this process resolves only lookup: charge was resolved by life 2, which is gone
    expect(s3.recovery.uncertainToolCalls.map((c) => c.callId)).toEqual(['l1']);
    const r = await s3.execute({ kind: 'continue', runId: 'r', attemptId: 'a3' });
    const expected = [
      { name: 'charge', callId: 'c1', mode: 'exclusive', resolution: 'uncertain-hanging' },
      { name: 'lookup', callId: 'l1', mode: 'parallel', resolution: 're-run' },
    ];
    expect(r).toMatchObject({ status: 'succeeded', uncertainCalls: expected });
    // the recorded result says the same, in any process
    await rt3.close();
    const rt4 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]), tools: [] });
    const s4 = await rt4.openSession('s');
    expect((await s4.execute({ kind: 'continue', runId: 'r', attemptId: 'a3' })).uncertainCalls).toEqual(expected);
    // what the model read for the uncertain call: whole sentences, the lock named
    const text = s4.snapshot().messages.find((m) => m.role === 'tool' && m.toolCallId === 'c1')!.content;
    expect(text).toMatch(/^Outcome uncertain: .*is unknown\. The resource card stays locked until released\.$/);
    await rt4.close();
    await dir.cleanup();
  });

  it('the model-facing text of an uncertain call without resources mentions no locks', async () => {
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
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel(['unsure']), tools: [send(() => 'sent')] });
    const s2 = await rt2.openSession('s', { resume: 'manual' });
    // resume: 'manual': a new prompt over the interrupted run runs nothing, and the error says to continue it
    const busy = await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'other' }).catch((e: unknown) => e);
    expect(busy).toMatchObject({ name: 'ExecutionBusy', state: 'interrupted', activeRunId: 'r' });
    expect((busy as Error).message).toContain("execute({ kind: 'continue', runId: 'r' })");
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({
      uncertainCalls: [{ callId: 'm1', resolution: 'uncertain-hanging' }],
    });
    const text = s2.snapshot().messages.find((m) => m.role === 'tool')!.content;
    expect(text).toMatch(/is unknown\.$/);
    expect(text).not.toMatch(/lock|\(none\)/);
    await rt2.close();
    await dir.cleanup();
  });

  it('an exclusive call without reconcile becomes uncertain-hanging, never re-run; its locks stay until released', async () => {
    const dir = tempDir();
    const runs: string[] = [];
    const started = deferred();
    const charge1 = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({ n: z.number() }),
      resources: ['card'],
      execute: () => (runs.push('1'), started.resolve(), hang()),
    });
    const charge2 = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({ n: z.number() }),
      resources: ['card'],
      execute: () => (runs.push('2'), 'charged'),
    });
    const { rt1, open2 } = twoLives(
      dir.path,
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'charge', arguments: { n: 5 } }] }]), tools: [charge1] },
      { model: scriptedModel(['I could not confirm the charge.']), tools: [charge2] },
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'charge 5' });
    await started.promise;
    const rt2 = open2();
    const s2 = await rt2.openSession('s');
    expect(s2.recovery).toMatchObject({
      writerEpoch: 2,
      interruptedRuns: [{ runId: 'r', runEpoch: 1 }],
      uncertainToolCalls: [
        { callId: 'c1', name: 'charge', mode: 'exclusive', resolution: 'uncertain-hanging', idempotencyKey: 's/r/1/c1' },
      ],
    });
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'I could not confirm the charge.' });
    expect(runs).toEqual(['1']);
    const log = await logOf(rt2.store, 's');
    expect(log.find((e) => e.type === 'tool/result')!.payload.outcome).toMatchObject({
      kind: 'uncertain-hanging',
      resourceLocks: ['card'],
    });
    expect(s2.activeResourceLocks).toEqual(['card']);
    await rt2.close();
    const rt3 = open2();
    const s3 = await rt3.openSession('s');
    expect(s3.recovery.activeResourceLocks).toEqual(['card']);
    await s3.releaseResources(['card']);
    expect(s3.activeResourceLocks).toEqual([]);
    await rt3.close();
    await dir.cleanup();
  });

  it('an exclusive call with reconcile is asked, with the same idempotencyKey', async () => {
    const dir = tempDir();
    const started = deferred();
    const keys: string[] = [];
    const t1 = defineTool({
      name: 'send',
      description: '',
      parameters: z.object({}),
      execute: (_a, ctx) => (keys.push(ctx.idempotencyKey), started.resolve(), hang()),
    });
    const t2 = defineTool({
      name: 'send',
      description: '',
      parameters: z.object({}),
      execute: () => 'should not run',
      reconcile: (_a, ctx) => (keys.push(`reconcile:${ctx.idempotencyKey}`), { kind: 'completed', content: 'it was sent' }),
    });
    const { rt1, open2 } = twoLives(
      dir.path,
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'send', arguments: {} }] }]), tools: [t1] },
      { model: scriptedModel(['sent']), tools: [t2] },
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'send' });
    await started.promise;
    const rt2 = open2();
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.uncertainToolCalls[0]!.resolution).toBe('reconcile');
    await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(keys).toEqual(['s/r/1/c1', 'reconcile:s/r/1/c1']);
    expect((await logOf(rt2.store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome).toMatchObject({
      kind: 'completed',
      content: 'it was sent',
    });
    await rt2.close();
    await dir.cleanup();
  });

  it('a parallel (side-effect free) call runs again', async () => {
    const dir = tempDir();
    const started = deferred();
    const runs: number[] = [];
    const t1 = defineTool({
      name: 'look',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (runs.push(1), started.resolve(), hang()),
    });
    const t2 = defineTool({
      name: 'look',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (runs.push(2), 'seen'),
    });
    const { rt1, open2 } = twoLives(
      dir.path,
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]), tools: [t1] },
      { model: scriptedModel(['done']), tools: [t2] },
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'look' });
    await started.promise;
    const rt2 = open2();
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.uncertainToolCalls[0]!.resolution).toBe('rerun');
    expect((await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).status).toBe('succeeded');
    expect(runs).toEqual([1, 2]);
    await rt2.close();
    await dir.cleanup();
  });

  it.each([
    [true, 'succeeded', 'delivered'],
    [false, 'delivery_unknown', 'unknown'],
  ] as const)('a final committed but not delivered (idempotent owner: %s) → %s', async (idempotent, status, list) => {
    const dir = tempDir();
    const entered = deferred();
    const delivered: string[] = [];
    const { rt1, open2 } = twoLives(
      dir.path,
      { model: scriptedModel(['the answer']), delivery: { deliver: () => (entered.resolve(), new Promise<void>(() => {})) } },
      { model: scriptedModel([]), delivery: { idempotent, deliver: async (f) => void delivered.push(f.finalMessageId) } },
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'q' });
    await entered.promise;
    const rt2 = open2();
    const s2 = await rt2.openSession('s');
    const log = await logOf(rt2.store, 's');
    const finalId = log.find((e) => e.type === 'final/message')!.payload.finalMessageId as string;
    expect(s2.recovery.interruptedRuns).toEqual([]);
    if (list === 'delivered') {
      expect(delivered).toEqual([finalId]);
      expect(s2.recovery.deliveredFinalIds).toContain(finalId);
    } else {
      expect(delivered).toEqual([]);
      expect(s2.recovery.deliveryUnknownFinalIds).toEqual([finalId]);
    }
    const end = log.at(-1)!;
    expect(end).toMatchObject({ type: 'run/end', payload: { status } });
    // the attempt's result is now recorded: executing it again runs nothing
    expect((await s2.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'q' })).status).toBe(status);
    await rt2.close();
    await dir.cleanup();
  });

  it('an accepted stop survives recovery', async () => {
    const dir = tempDir();
    const started = deferred();
    const t1 = defineTool({
      name: 'look',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (started.resolve(), hang()),
    });
    const t2 = defineTool({ name: 'look', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'seen' });
    const model2 = scriptedModel(['must not be asked']);
    const { rt1, open2 } = twoLives(
      dir.path,
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]), tools: [t1] },
      { model: model2, tools: [t2] },
    );
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'look' });
    await started.promise;
    await s1.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s1.sessionInstanceId,
      interactionId: 'r',
      expectedRunEpoch: 1,
      idempotencyKey: 'k',
    });
    const rt2 = open2();
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns[0]!.stopAccepted).toBe(true);
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'stopped', outcome: 'incomplete' });
    expect(model2.requests).toHaveLength(0);
    await rt2.close();
    await dir.cleanup();
  });

  it('a detached run continues in the same process and in a new one', async () => {
    const dir = tempDir();
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'ok'),
    });
    const model = scriptedModel([
      { toolCalls: [{ name: 'slow', arguments: {} }] },
      { toolCalls: [{ name: 'slow', arguments: {} }] },
      'finished',
    ]);
    const rt = createRuntime({ store: lmdbStore({ path: dir.path }), model, tools: [slow] });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    s.requestDetach();
    gate.resolve();
    expect((await p).status).toBe('detached');
    // same process: continue, and detach again after one more step
    const p2 = s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    s.requestDetach();
    expect((await p2).status).toBe('detached');
    await rt.close();
    // new process (a fresh runtime on the same file)
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model, tools: [slow] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', runEpoch: 2, lastStatus: 'detached' }]);
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a3' })).toMatchObject({
      status: 'succeeded',
      finalMessage: 'finished',
    });
    const steps = (await logOf(rt2.store, 's')).filter((e) => e.type === 'step/start').map((e) => e.step);
    expect(steps).toEqual([1, 2, 3]);
    await rt2.close();
    await dir.cleanup();
  });

  it('a fenced instance commits nothing more and runs no further tool', async () => {
    const dir = tempDir();
    const gate = deferred();
    const started = deferred();
    const runs: string[] = [];
    const step = defineTool({
      name: 'step',
      description: '',
      parameters: z.object({ n: z.number() }),
      execute: async ({ n }) => {
        runs.push(`A${n}`);
        if (n === 1) {
          started.resolve();
          await gate.promise;
        }
        return 'ok';
      },
    });
    const rtA = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([
        {
          toolCalls: [
            { name: 'step', arguments: { n: 1 } },
            { name: 'step', arguments: { n: 2 } },
          ],
        },
        'A done',
      ]),
      tools: [step],
    });
    const a = await rtA.openSession('s');
    const pa = a.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    const rtB = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel(['B done']),
      tools: [defineTool({ name: 'step', description: '', parameters: z.object({ n: z.number() }), execute: () => 'B' })],
    });
    const b = await rtB.openSession('s');
    const before = (await logOf(rtB.store, 's')).length;
    gate.resolve();
    const ra = await pa;
    expect(ra).toMatchObject({ outcome: 'incomplete', status: 'fenced', error: { kind: 'inconsistent' } });
    expect(runs).toEqual(['A1']);
    expect((await logOf(rtB.store, 's')).length).toBe(before);
    expect(await a.execute({ kind: 'prompt', runId: 'r2', attemptId: 'x', message: 'again' })).toMatchObject({ status: 'fenced' });
    expect((await b.execute({ kind: 'continue', runId: 'r', attemptId: 'b1' })).status).toBe('succeeded');
    await sleep(10);
    await rtB.close();
    await rtA.close();
    await dir.cleanup();
  });
});
