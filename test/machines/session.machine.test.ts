import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor } from 'xstate';
import type { CommitResultsInput } from '../../src/actors/commit-results.js';
import type { CallModelInput, CallModelOutput } from '../../src/actors/call-model.js';
import type { ToolCallIntent } from '../../src/contracts/calls.js';
import type { CommitIntentInput, CommitIntentOutput } from '../../src/actors/commit-intent.js';
import type { EndRunInput } from '../../src/actors/end-run.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import { runMachine, type RunActorRef, type RunInput } from '../../src/machines/run.machine.js';
import { sessionMachine } from '../../src/machines/session.machine.js';
import type { ToolBatchOutput } from '../../src/machines/tool-batch.machine.js';
import { fakeBatch, runInput } from '../helpers/fake-batch.js';
import { deferred } from '../helpers/drafts.js';

const resultOf = (input: RunInput, over: Partial<ExecutionResult> = {}): ExecutionResult => ({
  runId: input.runId,
  attemptId: input.attemptId,
  outcome: 'completed',
  status: 'succeeded',
  finalMessage: 'hello',
  checkpointCommitted: true,
  historyConsistent: true,
  deliveryErrors: [],
  usage: { inputTokens: 1, outputTokens: 1 },
  steps: 1,
  ...over,
});

/** A fake 'run' actor: each run waits for the test to finish it with a result. */
function fakeRun() {
  const runs: { input: RunInput; signal: AbortSignal; finish: (over?: Partial<ExecutionResult>) => void }[] = [];
  const run = fromPromise<ExecutionResult, RunInput>(async ({ input, signal }) => {
    const d = deferred<ExecutionResult>();
    runs.push({ input, signal, finish: (over = {}) => d.resolve(resultOf(input, over)) });
    return d.promise;
  });
  return { run, runs };
}

function startSession(run: ReturnType<typeof fakeRun>['run']) {
  const actor = createActor(sessionMachine.provide({ actors: { run: run as unknown as typeof runMachine } }), { input: { sessionId: 's1', sessionInstanceId: 'i1', writerEpoch: 1 } });
  const finished: ExecutionResult[] = [];
  actor.on('run.finished', ({ result }) => finished.push(result));
  actor.start();
  return { actor, finished };
}

describe('sessionMachine', () => {
  it('starts idle', () => {
    const { actor } = startSession(fakeRun().run);
    expect(actor.getSnapshot().value).toBe('idle');
  });

  it('EXECUTE moves idle → executing → idle and emits run.finished with the run result', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    const input = runInput();
    actor.send({ type: 'EXECUTE', run: input });
    expect(actor.getSnapshot().value).toBe('executing');
    expect(actor.getSnapshot().context).toMatchObject({ activeRunId: 'r1', activeAttemptId: 'a1' });
    await waitFor(actor, () => fake.runs.length === 1);
    expect(fake.runs[0]!.input).toEqual(input);
    expect(finished).toEqual([]);

    fake.runs[0]!.finish();
    const snap = await waitFor(actor, (s) => s.matches('idle'));
    expect(finished).toHaveLength(1);
    expect(finished[0]).toMatchObject({ runId: 'r1', attemptId: 'a1', status: 'succeeded', finalMessage: 'hello' });
    expect(snap.context.lastResult).toEqual(finished[0]);
    expect(snap.context.activeRunId).toBeUndefined();
  });

  it('runs one attempt after another, emitting run.finished for each', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish();
    await waitFor(actor, (s) => s.matches('idle'));
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r2' }) });
    await waitFor(actor, () => fake.runs.length === 2);
    expect(fake.runs[1]!.input.runId).toBe('r2');
    fake.runs[1]!.finish({ status: 'failed', outcome: 'failed' });
    await waitFor(actor, (s) => s.matches('idle'));
    expect(finished.map((r) => [r.runId, r.status])).toEqual([
      ['r1', 'succeeded'],
      ['r2', 'failed'],
    ]);
  });

  it('ignores an EXECUTE while a run is executing (one run at a time)', async () => {
    const fake = fakeRun();
    const { actor } = startSession(fake.run);
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r2' }) });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(fake.runs).toHaveLength(1);
    expect(actor.getSnapshot().context.activeRunId).toBe('r1');
  });

  it('moves to fenced when the run ends fenced, still emitting run.finished', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'EXECUTE', run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish({ status: 'fenced', outcome: 'incomplete', error: { kind: 'inconsistent', message: 'stale writer' } });
    const snap = await waitFor(actor, (s) => s.matches('fenced'));
    expect(finished.map((r) => r.status)).toEqual(['fenced']);
    expect(snap.context.lastResult?.status).toBe('fenced');
    actor.send({ type: 'CLOSE' });
    expect(actor.getSnapshot().value).toBe('closed');
    expect(actor.getSnapshot().status).toBe('done');
  });

  // A fenced session answers an EXECUTE at once with a `fenced` result (ExecutionSession.execute
  // waits for 'run.finished', so a dropped EXECUTE would hang it).
  it('answers an EXECUTE sent while fenced instead of dropping it', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish({ status: 'fenced', outcome: 'incomplete' });
    await waitFor(actor, (s) => s.matches('fenced'));
    actor.send({ type: 'EXECUTE', run: runInput({ runId: 'r2' }) });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(finished.map((r) => r.runId)).toEqual(['r1', 'r2']);
    expect(finished[1]!.status).toBe('fenced');
  });

  it('CLOSE moves idle → closed, a final state', () => {
    const { actor } = startSession(fakeRun().run);
    actor.send({ type: 'CLOSE' });
    const snap = actor.getSnapshot();
    expect(snap.value).toBe('closed');
    expect(snap.status).toBe('done');
  });

  it('CLOSE while executing closes the session and aborts the run without emitting run.finished', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'EXECUTE', run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    expect(fake.runs[0]!.signal.aborted).toBe(false);
    actor.send({ type: 'CLOSE' });
    expect(actor.getSnapshot().value).toBe('closed');
    expect(fake.runs[0]!.signal.aborted).toBe(true);
    fake.runs[0]!.finish();
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(finished).toEqual([]);
  });

  it('forwards STOP_AFTER_ROUND to the run it executes', async () => {
    const batchGate = deferred<ToolBatchOutput>();
    const calls: ToolCallIntent[] = [{ callId: 'c1', name: 'echo', arguments: {}, mode: 'parallel', resources: [], idempotencyKey: 's1/r1/c1' }];
    const steps: CallModelOutput[] = [
      { kind: 'toolCalls', toolCalls: [{ id: 'c1', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls' },
      { kind: 'answer', content: 'never' },
    ];
    const modelSteps: CallModelInput[] = [];
    const commits: CommitResultsInput[] = [];
    const run = runMachine.provide({
      actors: {
        startRun: fromPromise(async () => ({ runStartSeq: 2 })),
        prepareContext: fromPromise(async () => ({})),
        callModel: fromPromise<CallModelOutput, CallModelInput>(async ({ input }) => steps[modelSteps.push(input) - 1]!),
        commitIntent: fromPromise<CommitIntentOutput, CommitIntentInput>(async () => ({ kind: 'intents', calls })),
        commitResults: fromPromise<{ rejections: number }, CommitResultsInput>(async ({ input }) => (commits.push(input), { rejections: 0 })),
        endRun: fromPromise<ExecutionResult, EndRunInput>(async ({ input }) => input.result),
        toolBatch: fakeBatch(() => batchGate.promise),
      },
    });
    const actor = createActor(sessionMachine.provide({ actors: { run: run as unknown as typeof runMachine } }), { input: { sessionId: 's1', sessionInstanceId: 'i1', writerEpoch: 1 } });
    const finished: ExecutionResult[] = [];
    actor.on('run.finished', ({ result }) => finished.push(result));
    actor.start();
    actor.send({ type: 'EXECUTE', run: runInput() });
    const child = actor.getSnapshot().children.run as RunActorRef | undefined;
    expect(child).toBeDefined();
    await waitFor(child!, (s) => s.matches('runningTools'));
    actor.send({ type: 'STOP_AFTER_ROUND' });
    batchGate.resolve([
      { callId: 'c1', name: 'echo', outcome: { kind: 'completed', content: 'x', isError: false, concludesTurn: false, releaseResources: [] }, startedAt: 1, endedAt: 2 },
    ]);
    await waitFor(actor, (s) => s.matches('idle'));
    expect(modelSteps).toHaveLength(1);
    expect(commits).toHaveLength(1);
    expect(finished.map((r) => r.status)).toEqual(['stopped']);
  });

  // XState v5 propagates an unhandled child error to the parent: the session's onError on the
  // run invoke keeps the session alive (back to idle, reporting a failed run).
  it('survives a run actor that throws', async () => {
    const run = fromPromise<ExecutionResult, RunInput>(async () => {
      throw new Error('run machine crashed');
    });
    const actor = createActor(sessionMachine.provide({ actors: { run: run as unknown as typeof runMachine } }), { input: { sessionId: 's1', sessionInstanceId: 'i1', writerEpoch: 1 } });
    actor.subscribe({ error: () => {} });
    const finished: ExecutionResult[] = [];
    actor.on('run.finished', ({ result }) => finished.push(result));
    actor.start();
    const input = runInput();
    actor.send({ type: 'EXECUTE', run: input });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(actor.getSnapshot().status).toBe('active');
    expect(actor.getSnapshot().value).toBe('idle');
    // the failed result names the attempt, so the caller waiting for it is answered
    expect(finished).toEqual([expect.objectContaining({ runId: input.runId, attemptId: input.attemptId, status: 'failed', outcome: 'failed' })]);
  });
});
