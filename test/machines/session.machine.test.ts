import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor } from 'xstate';
import type { CommitResultsInput } from '../../src/actors/commit-results.js';
import type { CallModelInput, CallModelOutput } from '../../src/actors/call-model.js';
import type { ToolCallIntent } from '../../src/contracts/calls.js';
import type { CommitIntentInput, CommitIntentOutput } from '../../src/actors/commit-intent.js';
import type { EndRunInput } from '../../src/actors/end-run.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import { runMachine, type RunActorRef, type RunInput } from '../../src/machines/run.machine.js';
import {
  sessionMachine,
  type PrepareInput,
  type PrepareOutput,
  type SessionInput,
  type SettleOutput,
} from '../../src/machines/session.machine.js';
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
  uncertainCalls: [],
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

/** Where a fake settle rests the session: as the real one would for the result's status. */
const restFor = (r: ExecutionResult): SettleOutput => ({
  rest: r.status === 'fenced' ? 'fenced' : r.status === 'suspended' ? 'suspended' : r.status === 'detached' ? 'detached' : 'idle',
});

/** A fake 'prepareAttempt' actor: each preparation waits for the test to decide it. */
function fakePrepare() {
  const preparing: { input: PrepareInput; decide: (out: PrepareOutput | Error) => void }[] = [];
  const prepareAttempt = fromPromise<PrepareOutput, PrepareInput>(({ input }) => {
    const d = deferred<PrepareOutput>();
    preparing.push({ input, decide: (out) => (out instanceof Error ? d.reject(out) : d.resolve(out)) });
    return d.promise;
  });
  return { prepareAttempt, preparing };
}

const request = { kind: 'prompt' as const, runId: 'r1', attemptId: 'a1', message: 'hi' };

function startSession(run: ReturnType<typeof fakeRun>['run'], input: Partial<SessionInput> = {}, prepare = fakePrepare()) {
  const machine = sessionMachine.provide({
    actors: {
      run: run as unknown as typeof runMachine,
      prepareAttempt: prepare.prepareAttempt,
      settleAttempt: fromPromise<SettleOutput, { result: ExecutionResult }>(async ({ input }) => restFor(input.result)),
      closeSession: fromPromise<void, void>(async () => {}),
    },
  });
  const actor = createActor(machine, { input: { sessionId: 's1', sessionInstanceId: 'i1', writerEpoch: 1, ...input } });
  const finished: ExecutionResult[] = [];
  const answered: { token: number; result?: ExecutionResult; error?: unknown }[] = [];
  actor.on('session.rested', ({ result }) => result && finished.push(result));
  actor.on('attempt.answered', ({ token, result }) => answered.push({ token, result }));
  actor.on('attempt.refused', ({ token, error }) => answered.push({ token, error }));
  actor.start();
  return { actor, finished, answered, preparing: prepare.preparing };
}

describe('sessionMachine', () => {
  it('starts idle', () => {
    const { actor } = startSession(fakeRun().run);
    expect(actor.getSnapshot().value).toBe('idle');
  });

  it('rests suspended or detached when opening found a run open', () => {
    expect(startSession(fakeRun().run, { openRun: 'suspended' }).actor.getSnapshot().value).toBe('suspended');
    expect(startSession(fakeRun().run, { openRun: 'detached' }).actor.getSnapshot().value).toBe('detached');
  });

  it('PREPARE → preparing (prepareAttempt reads the log); a cancel and a detach asked for meanwhile go with the attempt when it starts', async () => {
    const fake = fakeRun();
    const { actor, preparing } = startSession(fake.run);
    actor.send({ type: 'PREPARE', token: 1, request, claimedRunId: 'r1' });
    expect(actor.getSnapshot().value).toBe('preparing');
    expect(actor.getSnapshot().context.claimedRunId).toBe('r1');
    expect(preparing.map((p) => p.input)).toEqual([{ token: 1, request }]);
    actor.send({ type: 'CANCEL' });
    actor.send({ type: 'DETACH' });
    // a follow-up cannot start while an attempt is being prepared
    actor.send({ type: 'START', run: runInput({ runId: 'f1' }) });
    expect(actor.getSnapshot().value).toBe('preparing');
    preparing[0]!.decide({ run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    // the cancel is recorded with the attempt's run/start (its reason), so that it outlives a crash
    expect(fake.runs[0]!.input).toMatchObject({
      runId: 'r1',
      cancelRequested: true,
      cancelToRecord: 'requestCancel',
      detachRequested: true,
    });
    expect(actor.getSnapshot().context.claimedRunId).toBeUndefined();
  });

  it('a cancel asked for while an attempt is prepared whose run the log already holds cancelled is not recorded again', async () => {
    const fake = fakeRun();
    const { actor, preparing } = startSession(fake.run);
    actor.send({ type: 'PREPARE', token: 1, request, claimedRunId: 'r1' });
    actor.send({ type: 'CANCEL', reason: 'again' });
    preparing[0]!.decide({ run: runInput({ cancelRequested: true }) });
    await waitFor(actor, () => fake.runs.length === 1);
    expect(fake.runs[0]!.input).toMatchObject({ cancelRequested: true });
    expect(fake.runs[0]!.input).not.toHaveProperty('cancelToRecord');
  });

  it('an attempt answered without running rests the session where it was, forgetting what was asked for it; its caller gets the answer', async () => {
    const { actor, preparing, answered } = startSession(fakeRun().run, { openRun: 'suspended' });
    actor.send({ type: 'PREPARE', token: 7, request });
    actor.send({ type: 'CANCEL' });
    const recorded = resultOf(runInput());
    preparing[0]!.decide({ result: recorded });
    await waitFor(actor, (s) => s.matches('suspended'));
    expect(actor.getSnapshot().context.cancelPending).toBeUndefined();
    expect(answered).toEqual([{ token: 7, result: recorded }]);
  });

  it('an attempt refused while prepared (bad input for the open run) answers its caller with the error; the session rests', async () => {
    const { actor, preparing, answered } = startSession(fakeRun().run, { openRun: 'detached' });
    actor.send({ type: 'PREPARE', token: 3, request });
    const refusal = new Error('run r1 is not open');
    preparing[0]!.decide(refusal);
    await waitFor(actor, (s) => s.matches('detached'));
    expect(answered).toEqual([{ token: 3, error: refusal }]);
    expect(actor.getSnapshot().context.preparing).toBeUndefined();
  });

  it('an attempt that ends suspended rests the session suspended (executing → finalizing → suspended)', async () => {
    const fake = fakeRun();
    const { actor } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish({ status: 'suspended', outcome: 'suspended' });
    await waitFor(actor, (s) => s.matches('suspended'));
  });

  it('START moves idle → executing → finalizing → idle and announces the run result on resting', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    const input = runInput();
    actor.send({ type: 'START', run: input });
    expect(actor.getSnapshot().value).toBe('executing');
    expect(actor.getSnapshot().context.current).toMatchObject({ runId: 'r1', attemptId: 'a1' });
    await waitFor(actor, () => fake.runs.length === 1);
    expect(fake.runs[0]!.input).toEqual(input);
    expect(finished).toEqual([]);

    fake.runs[0]!.finish();
    const snap = await waitFor(actor, (s) => s.matches('idle'));
    expect(finished).toHaveLength(1);
    expect(finished[0]).toMatchObject({ runId: 'r1', attemptId: 'a1', status: 'succeeded', finalMessage: 'hello' });
    expect(snap.context.current).toBeUndefined();
  });

  it('runs one attempt after another, announcing each result', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish();
    await waitFor(actor, (s) => s.matches('idle'));
    actor.send({ type: 'START', run: runInput({ runId: 'r2' }) });
    await waitFor(actor, () => fake.runs.length === 2);
    expect(fake.runs[1]!.input.runId).toBe('r2');
    fake.runs[1]!.finish({ status: 'failed', outcome: 'failed' });
    await waitFor(actor, (s) => s.matches('idle'));
    expect(finished.map((r) => [r.runId, r.status])).toEqual([
      ['r1', 'succeeded'],
      ['r2', 'failed'],
    ]);
  });

  it('ignores a START while a run is executing (one run at a time)', async () => {
    const fake = fakeRun();
    const { actor } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    actor.send({ type: 'START', run: runInput({ runId: 'r2' }) });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(fake.runs).toHaveLength(1);
    expect(actor.getSnapshot().context.current?.runId).toBe('r1');
  });

  it('moves to fenced when the run ends fenced, still announcing its result', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish({ status: 'fenced', outcome: 'incomplete', error: { kind: 'inconsistent', message: 'stale writer' } });
    const snap = await waitFor(actor, (s) => s.matches('fenced'));
    expect(finished.map((r) => r.status)).toEqual(['fenced']);
    expect(snap.value).toBe('fenced');
    actor.send({ type: 'CLOSE' });
    await waitFor(actor, (s) => s.status === 'done');
    expect(actor.getSnapshot().value).toBe('closed');
  });

  it('starts no run once fenced (the facade answers such an attempt fenced)', async () => {
    const fake = fakeRun();
    const { actor } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput({ runId: 'r1' }) });
    await waitFor(actor, () => fake.runs.length === 1);
    fake.runs[0]!.finish({ status: 'fenced', outcome: 'incomplete' });
    await waitFor(actor, (s) => s.matches('fenced'));
    actor.send({ type: 'START', run: runInput({ runId: 'r2' }) });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(fake.runs).toHaveLength(1);
    expect(actor.getSnapshot().value).toBe('fenced');
  });

  it('CLOSE moves idle → closing → closed, a final state', async () => {
    const { actor } = startSession(fakeRun().run);
    actor.send({ type: 'CLOSE' });
    expect(actor.getSnapshot().value).toBe('closing');
    const snap = await waitFor(actor, (s) => s.status === 'done');
    expect(snap.value).toBe('closed');
  });

  it('CLOSE while executing closes the session and aborts the run without announcing a result', async () => {
    const fake = fakeRun();
    const { actor, finished } = startSession(fake.run);
    actor.send({ type: 'START', run: runInput() });
    await waitFor(actor, () => fake.runs.length === 1);
    expect(fake.runs[0]!.signal.aborted).toBe(false);
    actor.send({ type: 'CLOSE' });
    expect(actor.getSnapshot().value).toBe('closing');
    expect(fake.runs[0]!.signal.aborted).toBe(true);
    fake.runs[0]!.finish();
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(finished).toEqual([]);
  });

  it('forwards STOP_AFTER_ROUND to the run it executes', async () => {
    const batchGate = deferred<ToolBatchOutput>();
    const calls: ToolCallIntent[] = [
      { callId: 'c1', name: 'echo', arguments: {}, mode: 'parallel', resources: [], idempotencyKey: 's1/r1/c1' },
    ];
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
        commitResults: fromPromise<{ rejections: number }, CommitResultsInput>(
          async ({ input }) => (commits.push(input), { rejections: 0 }),
        ),
        endRun: fromPromise<ExecutionResult, EndRunInput>(async ({ input }) => input.result),
        toolBatch: fakeBatch(() => batchGate.promise),
      },
    });
    const { actor, finished } = startSession(run as never);
    actor.send({ type: 'START', run: runInput() });
    const child = actor.getSnapshot().children.run as RunActorRef | undefined;
    expect(child).toBeDefined();
    await waitFor(child!, (s) => s.matches('runningTools'));
    actor.send({ type: 'STOP_AFTER_ROUND' });
    batchGate.resolve([
      {
        callId: 'c1',
        name: 'echo',
        outcome: { kind: 'completed', content: 'x', isError: false, concludesTurn: false, releaseResources: [] },
        startedAt: 1,
        endedAt: 2,
      },
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
    const { actor, finished } = startSession(run as never);
    actor.subscribe({ error: () => {} });
    const input = runInput();
    actor.send({ type: 'START', run: input });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(actor.getSnapshot().status).toBe('active');
    expect(actor.getSnapshot().value).toBe('idle');
    // the failed result names the attempt, so the caller waiting for it is answered
    expect(finished).toEqual([
      expect.objectContaining({ runId: input.runId, attemptId: input.attemptId, status: 'failed', outcome: 'failed' }),
    ]);
  });
});
