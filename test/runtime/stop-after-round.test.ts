import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import {
  createRuntime,
  defineTool,
  isSessionSteeringConflict,
  lmdbStore,
  scriptedModel,
  type Envelope,
  type ExecutionSession,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { stopAtRunEnd } from '../helpers/flaky-store.js';
import { hookedStore, lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { lmdbRuntime, logOf, sleep, typesOf, within } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// stopAfterCurrentToolRound: an accepted stop is durable and ends its run `stopped` after the
// tool batch under way, wherever the run is when the stop lands; no other run is stopped.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('stopAfterCurrentToolRound', () => {
  it('checks every identity field, is durable and idempotent, and stops after the batch', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'done'),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'never asked']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    let runStart: Extract<Envelope['event'], { type: 'run_start' }> | undefined;
    s.events$.subscribe((e) => {
      if (e.event.type === 'run_start') runStart = e.event;
    });
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    expect(runStart).toMatchObject({ sessionInstanceId: s.sessionInstanceId, runId: 'r', runEpoch: 1 });
    const req = { sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r', expectedRunEpoch: 1, idempotencyKey: 'k1' };
    for (const [field, bad] of [
      ['sessionId', 'other'],
      ['sessionInstanceId', 'nope'],
      ['interactionId', 'r-other'],
      ['expectedRunEpoch', 2],
    ] as const) {
      const err = await s.stopAfterCurrentToolRound({ ...req, idempotencyKey: `bad-${field}`, [field]: bad }).catch((e) => e);
      expect(isSessionSteeringConflict(err)).toBe(true);
      expect(err.field).toBe(field);
    }
    const receipt = await s.stopAfterCurrentToolRound(req);
    expect(receipt).toMatchObject({ schemaVersion: 1, request: req, executionProfileFingerprint: runtime.executionProfileFingerprint });
    expect(await s.stopAfterCurrentToolRound(req)).toEqual(receipt);
    await expect(
      s.stopAfterCurrentToolRound({
        ...req,
        expectedRunEpoch: 1,
        interactionId: 'r',
        sessionId: 's',
        idempotencyKey: 'k1',
        sessionInstanceId: 'x',
      }),
    ).rejects.toSatisfy(isSessionSteeringConflict);
    expect(typesOf(await logOf(store, 's'))).toContain('steering/accepted');
    gate.resolve();
    const r = await running;
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped' });
    expect(model.requests).toHaveLength(1);
    expect((await logOf(store, 's')).filter((e) => e.type === 'tool/result')).toHaveLength(1);
  });

  it('the same stop request sent twice at once (a client retry) returns one receipt and the run still ends stopped with its tool result', async () => {
    const gate = deferred();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'done'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'never asked', 'second run']);
    const { runtime, store } = lmdbRuntime({ model, tools: [slow] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    const req = { sessionId: 's', sessionInstanceId: s.sessionInstanceId, interactionId: 'r', expectedRunEpoch: 1, idempotencyKey: 'k1' };
    const [first, retry] = await Promise.all([s.stopAfterCurrentToolRound(req), s.stopAfterCurrentToolRound(req)]);
    expect(retry).toEqual(first);
    gate.resolve();
    const r = await running;
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped', checkpointCommitted: true });
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'tool/result').map((e) => e.payload.callId)).toEqual(['c1']);
    expect(log.filter((e) => e.type === 'steering/accepted')).toHaveLength(1);
    // and the session keeps working afterwards
    expect((await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'again' })).status).toBe('succeeded');
  });

  it('a stop accepted during compaction (before the model call) starts no model call', async () => {
    const model = scriptedModel(['ok0', { text: 'SUMMARY', delayMs: 150 }, 'answer after the stop']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 1500, outputReserve: 100 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: 'x'.repeat(3000) });
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'z'.repeat(3000) });
    while (model.requests.length < 2) await sleep(2); // the summary call of the compaction is under way
    await s.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s.sessionInstanceId,
      interactionId: 'r1',
      expectedRunEpoch: 1,
      idempotencyKey: 'k',
    });
    const r = await running;
    expect((await logOf(store, 's')).some((e) => e.type === 'compaction')).toBe(true);
    expect(model.requests).toHaveLength(2);
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'stopped' });
  });

  it('a stop accepted before the run suspends for an approval still stops the run after the approved batch', async () => {
    const db = lmdbPath();
    const executed: string[] = [];
    const pay = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => (executed.push('pay'), 'paid'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }], delayMs: 100 }, 'should not be asked']);
    const rt = db.rt({ model, tools: [pay] });
    const s = await rt.openSession('s');
    let epoch = 0;
    s.events$.subscribe((e) => {
      if (e.event.type === 'run_start') epoch = e.event.runEpoch;
    });
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    while (epoch === 0) await sleep(2);
    await s.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s.sessionInstanceId,
      interactionId: 'r',
      expectedRunEpoch: 1,
      idempotencyKey: 'stop-1',
    });
    const r = await running;
    expect(r.status).toBe('suspended');
    const r2 = await s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    expect(executed).toEqual(['pay']);
    expect(model.requests).toHaveLength(1); // no new model call after the round
    expect(r2).toMatchObject({ status: 'stopped', outcome: 'incomplete' });
  });

  // Guards against (seen in scenarios-steering.test.ts, seed 4): a stop accepted for run r1 while its attempt was
  // ending `detached` (the run stays open) is durable and its receipt returned, but the in-process
  // `continue` of r1 ignores it: it calls the model and runs a new step. A fresh process on the same
  // log reports `stopAccepted: true` for the run and would stop. guarantees.md:
  // "stopAfterCurrentToolRound ... Survives recovery and suspension: a `continue` of that run stops
  // after resolving its interrupted batch"; "if the run ended while the request was being written,
  // the receipt is still returned and no later run is stopped" (a detached run has not ended: it
  // "stays open: `continue` resumes it").
  it('a stop accepted while the attempt detaches ends the continue of that run stopped, in the same process', async () => {
    const dir = tempDir();
    let gate!: () => void;
    const gateP = new Promise<void>((res) => (gate = res));
    let started!: () => void;
    const startedP = new Promise<void>((res) => (started = res));
    const look = defineTool({
      name: 'look',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: async () => (started(), await gateP, 'seen'),
    });
    // (a fresh process on this log would fold stopAccepted: true for r1 and end its continue stopped)
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }, 'done'], { loop: true });
    // the stop is sent just as the detached attempt writes its run/end (the attempt is still current)
    let s!: ExecutionSession;
    const { store, stop } = stopAtRunEnd(lmdbStore({ path: dir.path }), 'detached', () => s);
    const rt = createRuntime({ store, model, tools: [look] });
    s = await rt.openSession('s');
    const first = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await startedP;
    s.requestDetach();
    gate();
    const r1 = await first;
    const receipt = (await stop()) as { schemaVersion: number }; // durable and acknowledged
    const before = model.requests.length;
    const cont = await s.execute({ kind: 'continue', runId: 'r1', attemptId: 'a2' });
    const log = await logOf(rt.store, 's');
    // what a fresh process reports for the same log
    await rt.close();
    await dir.cleanup();
    expect(r1.status).toBe('detached');
    expect(receipt.schemaVersion).toBe(1);
    expect(log.some((e) => e.type === 'steering/accepted')).toBe(true);
    expect({ status: cont.status, newModelCalls: model.requests.length - before }).toEqual({ status: 'stopped', newModelCalls: 0 });
  });

  // Guards against (seen in scenarios-steering.test.ts, seed 505): a
  // stop accepted while the attempt was ending `suspended` (steering/accepted right after its
  // run/end) is ignored by the `respond` of that run, which calls the model 3 more times and
  // succeeds. guarantees.md: "Survives recovery and suspension: ... a `respond` after running the
  // approved batch" (ends `stopped`); DESIGN §4.10: "Acceptance is durable ... and survives recovery".
  it('a stop accepted while the attempt suspends ends the respond of that run stopped', async () => {
    const dir = tempDir();
    const wire = defineTool({ name: 'wire', description: '', needsApproval: true, parameters: z.object({}), execute: async () => 'wired' });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'wire', arguments: {} }] }, 'done'], { loop: true });
    let s!: ExecutionSession;
    const { store, stop } = stopAtRunEnd(lmdbStore({ path: dir.path }), 'suspended', () => s);
    const rt = createRuntime({ store, model, tools: [wire] });
    s = await rt.openSession('s');
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    const receipt = (await stop()) as { schemaVersion: number };
    const before = model.requests.length;
    const res = await s.execute({
      kind: 'respond',
      runId: 'r1',
      attemptId: 'a2',
      questionId: first.pendingRequest!.questionId,
      answer: { decisions: { c1: 'approve' } },
    });
    await rt.close();
    await dir.cleanup();
    expect(first.status).toBe('suspended');
    expect(receipt.schemaVersion).toBe(1);
    expect({ status: res.status, newModelCalls: model.requests.length - before }).toEqual({ status: 'stopped', newModelCalls: 0 });
  });

  it('a stop request racing the end of its run stops no follow-up run started after it', async () => {
    const db = lmdbPath();
    let session: ExecutionSession | undefined;
    let stop: Promise<unknown> | undefined;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      // the user asks run A to stop just as A's run/end is being committed
      if (!stop && drafts.some((d) => d.type === 'run/end' && d.payload.runId === 'A')) {
        stop = session!
          .stopAfterCurrentToolRound({
            sessionId: 's',
            sessionInstanceId: session!.sessionInstanceId,
            interactionId: 'A',
            expectedRunEpoch: 1,
            idempotencyKey: 'k',
          })
          .catch((e: unknown) => e);
      }
    });
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'echoed' });
    const rt = db.rt(
      {
        model: scriptedModel([
          { text: 'answer A', delayMs: 50 },
          { toolCalls: [{ name: 'echo', arguments: {} }], delayMs: 100 },
          'answer B',
        ]),
        tools: [echo],
      },
      store,
    );
    session = await rt.openSession('s');
    const results: ExecutionResult[] = [];
    session.events$.subscribe((e) => e.event.type === 'execution_finished' && results.push(e.event.result));
    const a = session.execute({ kind: 'prompt', runId: 'A', attemptId: 'A1', message: 'first' });
    await sleep(10);
    await session.submitInput({ inputId: 'B', message: 'second', mode: 'follow_up' });
    await a;
    await within(session.waitForIdle(), 2000);
    expect(stop).toBeDefined();
    await stop;
    expect(results.find((r) => r.runId === 'B')).toMatchObject({ status: 'succeeded', finalMessage: 'answer B' });
  });
});
