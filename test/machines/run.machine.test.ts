import type { ToolCallIntent } from '../../src/contracts/calls.js';
import { describe, expect, it } from 'vitest';
import { createActor, waitFor, type AnyActorRef, type InspectionEvent } from 'xstate';
import { fromPromise } from 'xstate';
import type { CallModelInput, CallModelOutput } from '../../src/actors/call-model.js';
import type { CommitIntentInput, CommitIntentOutput } from '../../src/actors/commit-intent.js';
import type { CommitResultsInput, CommitResultsOutput } from '../../src/actors/commit-results.js';
import type { EndRunInput } from '../../src/actors/end-run.js';
import type { DeliverFinalInput, DeliverFinalOutput, FinalAnswerInput, VerifyFinalOutput } from '../../src/actors/final-answer.js';
import type { PrepareContextInput, PrepareContextOutput } from '../../src/actors/prepare-context.js';
import type { StartRunInput, StartRunOutput } from '../../src/actors/start-run.js';
import type { ToolCallOutput } from '../../src/contracts/calls.js';
import { LoopBudget, type LoopBudgetInput } from '../../src/contracts/config.js';
import { CancelledError, isProtocolExhaustedError, StaleWriterError } from '../../src/contracts/errors.js';
import type { PendingRequest } from '../../src/contracts/events.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import type { Usage } from '../../src/contracts/message.js';
import { runMachine, type RunInput } from '../../src/machines/run.machine.js';
import type { ToolBatchOutput } from '../../src/machines/tool-batch.machine.js';
import { deferred } from '../helpers/drafts.js';
import { fakeBatch, type BatchRequest } from '../helpers/fake-batch.js';

const call = (callId: string): ToolCallIntent => ({
  callId,
  name: 'echo',
  arguments: { text: callId },
  mode: 'parallel',
  resources: [],
  idempotencyKey: `s1/r1/${callId}`,
});

const resultFor = (c: ToolCallIntent, content = `done ${c.callId}`): ToolCallOutput => ({
  callId: c.callId,
  name: c.name,
  outcome: { kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] },
  startedAt: 1,
  endedAt: 2,
});

const usage = (outputTokens: number) => ({ inputTokens: 10, outputTokens });

/** A RunInput as ExecutionSession.execute builds it. */
function runInput(budget: LoopBudgetInput = {}, over: Partial<RunInput> = {}): RunInput {
  return {
    runId: 'r1',
    attemptId: 'a1',
    runEpoch: 1,
    turn: 1,
    kind: 'prompt',
    messages: [{ role: 'user', content: 'what is 1+2?' }],
    executionProfileFingerprint: 'f'.repeat(64),
    budget: LoopBudget.parse(budget),
    maxProtocolCorrections: 2,
    maxParallelTools: 4,
    startedAt: Date.now(),
    ...over,
  };
}

/** What one step of the model does in a script: its answer as the intent commit decides it. */
type StepScript = { usage?: Usage; cost?: string } & (
  | { kind: 'tools'; calls: ToolCallIntent[] }
  | { kind: 'final'; content: string }
  | { kind: 'rejected' }
  | { kind: 'blocked'; locks: string[] }
  | { kind: 'suspend'; pendingRequest: PendingRequest }
);
type Step = StepScript | Error | (() => Promise<StepScript>);

/** How a script's final answer goes: rejected by the verifier, delivered, delivery unknown, or a throw. */
type FinalScript =
  | { kind: 'rejected'; reason: string }
  | { kind: 'delivered'; finalMessageId: string }
  | { kind: 'delivery_unknown'; finalMessageId: string; reason: string };

interface Script {
  /** One entry per model step, in order; an Error is thrown by the model call. */
  steps: Step[];
  /** The batch's output; defaults to one completed result per call. */
  batch?: (input: BatchRequest) => Promise<ToolBatchOutput> | ToolBatchOutput;
  /** One entry per commit; defaults to `{ rejections: 0 }`. */
  commits?: (CommitResultsOutput | Error)[];
  /** One entry per final answer; defaults to delivered. */
  finals?: (FinalScript | Error)[];
  startError?: Error;
  endError?: Error;
  /** startRun's output, when it should wait (a deferred promise). */
  start?: () => Promise<StartRunOutput>;
  /** Steps whose first model call finds the context unprepared (a steer waits, or it is too large). */
  unpreparedAt?: number[];
  /** What waiting for the step's results commit gives (settleResults); defaults to landed. */
  settle?: Error;
}

/** Fake phase actors that play a script and record every input they get. */
function fakes(script: Script) {
  const log: string[] = [];
  const inputs = {
    startRun: [] as StartRunInput[],
    prepareContext: [] as PrepareContextInput[],
    callModel: [] as CallModelInput[],
    commitIntent: [] as CommitIntentInput[],
    toolBatch: [] as BatchRequest[],
    commitResults: [] as CommitResultsInput[],
    finalize: [] as FinalAnswerInput[],
    deliver: [] as DeliverFinalInput[],
    endRun: [] as EndRunInput[],
  };
  const take = <T>(list: T[] | undefined, n: number, name: string): T | undefined => {
    if (list && n >= list.length) throw new Error(`script has no ${name} #${n + 1}`);
    return list?.[n];
  };
  const orThrow = <T>(v: T | Error): T => {
    if (v instanceof Error) throw v;
    return v;
  };
  const planned: StepScript[] = [];
  const finals: FinalScript[] = [];
  const actors = {
    startRun: fromPromise<StartRunOutput, StartRunInput>(async ({ input }) => {
      log.push('startRun');
      inputs.startRun.push(input);
      if (script.startError) throw script.startError;
      return script.start ? script.start() : { runStartSeq: 2 };
    }),
    prepareContext: fromPromise<PrepareContextOutput, PrepareContextInput>(async ({ input }) => {
      log.push(`prepareContext ${input.at.step}`);
      inputs.prepareContext.push(input);
      return {};
    }),
    callModel: fromPromise<CallModelOutput, CallModelInput>(async ({ input }) => {
      // the fake finds the context unprepared until the machine says it prepared it
      if (script.unpreparedAt?.includes(input.at.step) && !input.prepared) {
        log.push(`unprepared ${input.at.step}`);
        return { kind: 'unprepared' };
      }
      log.push(`callModel ${input.at.step}`);
      const s = take(script.steps, inputs.callModel.length, 'model step')!;
      inputs.callModel.push(input);
      const step = typeof s === 'function' ? await s() : orThrow(s);
      const spent = { ...(step.usage ? { usage: step.usage } : {}), ...(step.cost ? { cost: step.cost } : {}) };
      if (step.kind === 'final') return { kind: 'answer', content: step.content, ...spent };
      planned.push(step);
      return { kind: 'toolCalls', toolCalls: [{ id: 'x', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls', ...spent };
    }),
    commitIntent: fromPromise<CommitIntentOutput, CommitIntentInput>(async ({ input }) => {
      log.push(`commitIntent ${input.at.step}`);
      inputs.commitIntent.push(input);
      const step = planned.shift()!;
      if (step.kind === 'tools') return { kind: 'intents', calls: step.calls };
      if (step.kind === 'suspend') return { kind: 'suspended', pendingRequest: step.pendingRequest };
      if (step.kind === 'blocked') return { kind: 'blocked', locks: step.locks };
      return { kind: 'rejected' };
    }),
    toolBatch: fakeBatch(async (batch) => {
      log.push('toolBatch');
      inputs.toolBatch.push(batch);
      return script.batch ? script.batch(batch) : batch.calls.map((c) => resultFor(c));
    }),
    commitResults: fromPromise<CommitResultsOutput, CommitResultsInput>(async ({ input }) => {
      log.push(`commitResults ${input.at.step}`);
      const c = script.commits ? take(script.commits, inputs.commitResults.length, 'commit')! : { rejections: 0 };
      inputs.commitResults.push(input);
      return orThrow(c);
    }),
    verifyFinal: fromPromise<VerifyFinalOutput, FinalAnswerInput>(async ({ input }) => {
      log.push(`finalize ${input.at.step}`);
      const f = script.finals
        ? take(script.finals, inputs.finalize.length, 'finalize')!
        : ({ kind: 'delivered', finalMessageId: `${input.runId}/final/${input.at.attempt}.${input.at.step}` } as const);
      inputs.finalize.push(input);
      const planned = orThrow(f);
      if (planned.kind === 'rejected') return planned;
      finals.push(planned);
      return { kind: 'accepted' };
    }),
    commitFinal: fromPromise<{ finalMessageId: string }, FinalAnswerInput>(async () => ({
      finalMessageId: (finals[0] as { finalMessageId: string }).finalMessageId,
    })),
    deliverFinal: fromPromise<DeliverFinalOutput, DeliverFinalInput>(async ({ input }) => {
      inputs.deliver.push(input);
      const f = finals.shift()!;
      return f.kind === 'delivery_unknown' ? { kind: 'delivery_unknown', reason: f.reason } : { kind: 'delivered' };
    }),
    settleResults: fromPromise<void, void>(async () => {
      log.push('settleResults');
      if (script.settle) throw script.settle;
    }),
    endRun: fromPromise<ExecutionResult, EndRunInput>(async ({ input }) => {
      log.push('endRun');
      inputs.endRun.push(input);
      if (script.endError) throw script.endError;
      return input.result;
    }),
  };
  return { actors, inputs, log };
}

/** Runs the machine to its end; returns the result, the fakes' records and the states walked. */
async function run(script: Script, input: RunInput = runInput()) {
  const f = fakes(script);
  // Microsteps show transient states (checkingBudget) that snapshots to subscribers skip.
  const states: string[] = [];
  const inspect = (e: InspectionEvent) => {
    if (e.type !== '@xstate.snapshot' && e.type !== '@xstate.microstep') return;
    if ((e.actorRef as AnyActorRef).sessionId !== e.rootId) return;
    const v = String((e.snapshot as unknown as { value: unknown }).value);
    if (v === 'checkingBudget' || v === 'checkingCorrections') return; // transient: decided in the same macrostep
    if (states[states.length - 1] !== v) states.push(v);
  };
  const actor = createActor(runMachine.provide({ actors: f.actors }), { input, inspect });
  actor.start();
  const snap = await waitFor(actor, (s) => s.status === 'done');
  return { result: snap.output!, states, ...f, context: snap.context };
}

const tools = (...ids: string[]): StepScript => ({ kind: 'tools', calls: ids.map(call), usage: usage(5) });
const final = (content: string): StepScript => ({ kind: 'final', content, usage: usage(7) });
const rejected = (): StepScript => ({ kind: 'rejected', usage: usage(3) });

describe('runMachine', () => {
  it('without its actors provided, ends failed naming the missing actor instead of hanging', async () => {
    const actor = createActor(runMachine, { input: runInput() }).start();
    const snap = await waitFor(actor, (s) => s.status === 'done', { timeout: 2000 });
    expect(snap.output).toMatchObject({
      status: 'failed',
      checkpointCommitted: false,
      error: { message: 'the startRun actor is not provided' },
    });
  });

  it('walks a two-step run (tools, then a final answer) and succeeds with the final message', async () => {
    const { result, states, inputs, log } = await run({ steps: [tools('c1', 'c2'), final('It is 3.')] });
    // one named actor per phase, one state each
    // a context that is ready (no steer waits, it fits) goes to the model call without preparation
    expect(states).toEqual([
      'starting',
      'callingModel',
      'committingIntent',
      'runningTools',
      'committingResults',
      'callingModel',
      'verifyingFinal',
      'committingFinal',
      'delivering',
      'closing',
      'ending',
      'done',
    ]);
    expect(log).toEqual([
      'startRun',
      'callModel 1',
      'commitIntent 1',
      'toolBatch',
      'commitResults 1',
      'callModel 2',
      'finalize 2',
      'endRun',
    ]);
    expect(result).toMatchObject({
      runId: 'r1',
      attemptId: 'a1',
      status: 'succeeded',
      outcome: 'completed',
      finalMessage: 'It is 3.',
      finalMessageId: 'r1/final/1.2',
      steps: 2,
      checkpointCommitted: true,
    });
    expect(result.error).toBeUndefined();
    expect(result.usage).toMatchObject({ inputTokens: 20, outputTokens: 12 });

    expect(inputs.startRun[0]).toMatchObject({
      runId: 'r1',
      attemptId: 'a1',
      runEpoch: 1,
      turn: 1,
      kind: 'prompt',
      messages: [{ role: 'user', content: 'what is 1+2?' }],
    });
    expect(inputs.callModel.map((i) => i.at.step)).toEqual([1, 2]);
    expect(inputs.prepareContext).toEqual([]);
    expect(inputs.callModel.map((i) => i.at)).toEqual([
      { turn: 1, step: 1, attempt: 1 },
      { turn: 1, step: 2, attempt: 1 },
    ]);
    // (the batch's place names the pool its sub-agents would spend from; no usage budget, nothing left to name)
    expect(inputs.toolBatch).toEqual([
      { runId: 'r1', calls: [call('c1'), call('c2')], maxParallel: 4, cancelled: false, budget: { batch: 'r1/1/1' } },
    ]);
    expect(inputs.commitResults[0]!.at.step).toBe(1);
    expect(inputs.commitResults[0]!.results.map((r) => r.callId)).toEqual(['c1', 'c2']);
    expect(inputs.commitResults[0]!.usage).toEqual(usage(5));
    expect(inputs.finalize).toEqual([
      { runId: 'r1', at: { turn: 1, step: 2, attempt: 1 }, content: 'It is 3.', closeStep: true, usage: usage(7) },
    ]);
    expect(inputs.endRun[0]).toMatchObject({ at: { turn: 1, step: 2, attempt: 1 }, started: true });
    expect(inputs.endRun[0]!.result.status).toBe('succeeded');
  });

  it('a model call that finds its context unprepared is made again after the context is prepared, at the same step', async () => {
    const { result, states, inputs, log } = await run({ steps: [tools('c1'), final('done')], unpreparedAt: [1, 2] });
    expect(log).toEqual([
      'startRun',
      'unprepared 1',
      'prepareContext 1',
      'callModel 1',
      'commitIntent 1',
      'toolBatch',
      'commitResults 1',
      'unprepared 2',
      'prepareContext 2',
      'callModel 2',
      'finalize 2',
      'endRun',
    ]);
    expect(inputs.prepareContext.map((i) => i.at)).toEqual(inputs.callModel.map((i) => i.at));
    // once prepared, the step's call is made as it stands: a steer that came meanwhile waits for the next step
    expect(inputs.callModel.map((i) => i.prepared)).toEqual([true, true]);
    expect(states.slice(0, 4)).toEqual(['starting', 'callingModel', 'preparingContext', 'callingModel']);
    expect(result).toMatchObject({ status: 'succeeded', steps: 2 });
  });

  it('passes the batch every call of the step and the run cap on parallel tools', async () => {
    const { inputs, context } = await run({ steps: [tools('a', 'b', 'c'), final('ok')] }, runInput({}, { maxParallelTools: 2 }));
    expect(inputs.toolBatch[0]!.maxParallel).toBe(2);
    expect(inputs.toolBatch[0]!.calls.map((c) => c.callId)).toEqual(['a', 'b', 'c']);
    expect(context.toolCalls).toBe(3);
  });

  describe('protocol corrections', () => {
    it('counts a rejected model step as a correction and steps again', async () => {
      const { result, inputs, log, context } = await run({ steps: [rejected(), final('fixed')] });
      expect(result.status).toBe('succeeded');
      expect(inputs.callModel.map((i) => i.at.step)).toEqual([1, 2]);
      expect(context.corrections).toBe(1);
      expect(log).not.toContain('toolBatch');
    });

    it('fails with ProtocolExhaustedError after more than maxProtocolCorrections', async () => {
      const { result, inputs, log, context } = await run(
        { steps: [rejected(), rejected(), rejected(), final('never')] },
        runInput({}, { maxProtocolCorrections: 2 }),
      );
      expect(inputs.callModel).toHaveLength(3);
      expect(context.corrections).toBe(3);
      expect(result).toMatchObject({ status: 'failed', outcome: 'failed', steps: 3 });
      expect(result.error?.kind).toBe('execution');
      expect(isProtocolExhaustedError(result.error?.cause)).toBe(true);
      expect((result.error!.cause as { corrections: number }).corrections).toBe(2);
      expect(log).not.toContain('finalize 3');
      expect(log[log.length - 1]).toBe('endRun');
    });

    it('fails on the first rejection when maxProtocolCorrections is 0', async () => {
      const { result, inputs } = await run({ steps: [rejected()] }, runInput({}, { maxProtocolCorrections: 0 }));
      expect(inputs.callModel).toHaveLength(1);
      expect(isProtocolExhaustedError(result.error?.cause)).toBe(true);
    });
  });

  describe('the results commit, landing under the next model call', () => {
    it('the next model call starts straight after commitResults, with no wait between them', async () => {
      const { log, states } = await run({ steps: [tools('a'), final('done')] });
      expect(log.slice(log.indexOf('commitResults 1'), log.indexOf('callModel 2') + 1)).toEqual(['commitResults 1', 'callModel 2']);
      expect(states).not.toContain('settlingResults');
    });

    it("a run ended after a step (a spent budget) waits for the step's results to land before it ends", async () => {
      const { log, states, result } = await run({ steps: [tools('a'), tools('b')] }, runInput({ maxSteps: 1 }));
      expect(log.slice(-2)).toEqual(['settleResults', 'endRun']);
      expect(states.slice(-4)).toEqual(['settlingResults', 'closing', 'ending', 'done']);
      expect(result).toMatchObject({ status: 'budget_exhausted', budget: 'maxSteps' });
    });

    it('a results commit that failed fails the run with its error, as a failed commitResults does, whatever ended the run', async () => {
      const { result } = await run({ steps: [tools('a'), tools('b')], settle: new Error('disk full') }, runInput({ maxSteps: 1 }));
      expect(result).toMatchObject({ status: 'failed', error: { message: 'disk full' } });
    });

    it('a cancel during the next model call ends the run once the results landed, and failed with their error if they did not', async () => {
      for (const settle of [undefined, new Error('disk full')]) {
        const gate = deferred<StepScript>();
        const f = fakes({ steps: [tools('a'), () => gate.promise], ...(settle ? { settle } : {}) });
        const actor = createActor(runMachine.provide({ actors: f.actors }), { input: runInput() });
        actor.start();
        await waitFor(actor, (s) => s.matches('callingModel') && s.context.step === 2);
        actor.send({ type: 'CANCEL' });
        const snap = await waitFor(actor, (s) => s.status === 'done');
        expect(f.log.slice(-2)).toEqual(['settleResults', 'endRun']);
        expect(snap.output).toMatchObject(settle ? { status: 'failed', error: { message: 'disk full' } } : { status: 'cancelled' });
      }
    });

    it('a concluded answer is not verified when the results that concluded it failed to land', async () => {
      const { result, inputs } = await run({
        steps: [tools('a')],
        commits: [{ concluded: 'the tool said so', rejections: 0 }],
        settle: new Error('disk full'),
      });
      expect(inputs.finalize).toHaveLength(0);
      expect(result).toMatchObject({ status: 'failed', error: { message: 'disk full' } });
    });
  });

  describe('budgets', () => {
    it('ends budget_exhausted naming maxSteps when the steps are spent', async () => {
      const { result, inputs } = await run({ steps: [tools('a'), tools('b'), tools('c')] }, runInput({ maxSteps: 2 }));
      expect(inputs.callModel.map((i) => i.at.step)).toEqual([1, 2]);
      expect(inputs.commitResults).toHaveLength(2);
      expect(result).toMatchObject({ status: 'budget_exhausted', outcome: 'incomplete', budget: 'maxSteps', steps: 2 });
      expect(inputs.finalize).toEqual([]);
    });

    it('still delivers a final answer given on the last allowed step', async () => {
      const { result } = await run({ steps: [tools('a'), final('just in time')] }, runInput({ maxSteps: 2 }));
      expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'just in time' });
    });

    it('ends budget_exhausted naming maxToolCalls once the tool calls are spent', async () => {
      const { result, inputs } = await run({ steps: [tools('a', 'b'), tools('c', 'd'), final('never')] }, runInput({ maxToolCalls: 3 }));
      expect(inputs.toolBatch.map((b) => b.calls.length)).toEqual([2, 2]);
      expect(result).toMatchObject({ status: 'budget_exhausted', budget: 'maxToolCalls', steps: 2 });
    });

    it('ends budget_exhausted naming maxOutputTokens', async () => {
      const { result } = await run({ steps: [tools('a'), tools('b'), final('never')] }, runInput({ maxOutputTokens: 10 }));
      expect(result).toMatchObject({ status: 'budget_exhausted', budget: 'maxOutputTokens', steps: 2 });
    });

    it('ends budget_exhausted naming maxCost, summing step costs exactly', async () => {
      const priced = (id: string): StepScript => ({ ...tools(id), cost: '0.1' });
      const { result, context } = await run(
        { steps: [priced('a'), priced('b'), priced('c'), final('never')] },
        runInput({ maxCost: '0.3' }),
      );
      expect(context.cost).toBe('0.3');
      expect(result).toMatchObject({ status: 'budget_exhausted', budget: 'maxCost', steps: 3 });
    });
  });

  describe('final answer', () => {
    it('counts a rejected final answer as a recovery and steps again', async () => {
      const { result, inputs, context } = await run({
        steps: [final('draft'), final('better')],
        finals: [
          { kind: 'rejected', reason: 'too vague' },
          { kind: 'delivered', finalMessageId: 'r1/final/1.2' },
        ],
      });
      expect(inputs.finalize.map((f) => [f.at.step, f.content])).toEqual([
        [1, 'draft'],
        [2, 'better'],
      ]);
      expect(context.recoveries).toBe(1);
      expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'better', finalMessageId: 'r1/final/1.2' });
    });

    it('ends budget_exhausted naming maxRecoveries after more than maxRecoveries rejections', async () => {
      const reject = { kind: 'rejected', reason: 'no' } as const;
      const { result, inputs } = await run(
        { steps: [final('1'), final('2'), final('3'), final('4')], finals: [reject, reject, reject, reject] },
        runInput({ maxRecoveries: 2 }),
      );
      expect(inputs.finalize).toHaveLength(3);
      expect(inputs.callModel).toHaveLength(3);
      expect(result).toMatchObject({ status: 'budget_exhausted', outcome: 'incomplete', budget: 'maxRecoveries' });
      expect(result.finalMessage).toBeUndefined();
    });

    it('counts tool-result rejections from commitResults as recoveries', async () => {
      const { result } = await run(
        { steps: [tools('a'), tools('b'), final('never')], commits: [{ rejections: 1 }, { rejections: 1 }] },
        runInput({ maxRecoveries: 1 }),
      );
      expect(result).toMatchObject({ status: 'budget_exhausted', budget: 'maxRecoveries', steps: 2 });
    });

    it('ends delivery_unknown with outcome failed and a finalization error when delivery is unknown', async () => {
      const { result } = await run({
        steps: [final('hello')],
        finals: [{ kind: 'delivery_unknown', finalMessageId: 'r1/final/1.1', reason: 'delivery owner threw: offline' }],
      });
      expect(result).toMatchObject({
        status: 'delivery_unknown',
        outcome: 'failed',
        finalMessage: 'hello',
        finalMessageId: 'r1/final/1.1',
        error: { kind: 'finalization', message: 'delivery owner threw: offline' },
      });
    });

    it('goes to finalizing, once the results have landed, with closeStep false when a result concludes the turn', async () => {
      const { result, states, inputs } = await run({ steps: [tools('a')], commits: [{ concluded: 'the tool said so', rejections: 0 }] });
      expect(states).toEqual([
        'starting',
        'callingModel',
        'committingIntent',
        'runningTools',
        'committingResults',
        'settlingResults',
        'verifyingFinal',
        'committingFinal',
        'delivering',
        'closing',
        'ending',
        'done',
      ]);
      expect(inputs.callModel).toHaveLength(1);
      expect(inputs.finalize).toHaveLength(1);
      expect(inputs.finalize[0]).toMatchObject({ at: { step: 1 }, content: 'the tool said so', closeStep: false });
      expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'the tool said so', steps: 1 });
    });

    // FinalizeInput.usage is "Usage of the step that produced the answer (for step/end); absent
    // for concludesTurn": that step's step/end was already written by commitResults.
    it('passes no usage to finalize for a concludesTurn answer (FinalizeInput contract)', async () => {
      const { inputs } = await run({ steps: [tools('a')], commits: [{ concluded: 'done', rejections: 0 }] });
      expect(inputs.finalize[0]!.closeStep).toBe(false);
      expect(inputs.finalize[0]).not.toHaveProperty('usage');
    });
  });

  it('ends blocked naming the held locks when the intent commit finds the batch blocked', async () => {
    const { result, log } = await run({ steps: [{ kind: 'blocked', locks: ['file:a', 'db:b'] }] });
    expect(result).toMatchObject({ status: 'blocked', outcome: 'incomplete', blockedBy: ['file:a', 'db:b'], steps: 1 });
    expect(log).toEqual(['startRun', 'callModel 1', 'commitIntent 1', 'endRun']);
  });

  describe('errors', () => {
    it('ends cancelled when an actor throws CancelledError', async () => {
      const { result, log } = await run({ steps: [new CancelledError('model call cancelled')] });
      expect(result).toMatchObject({
        status: 'cancelled',
        outcome: 'cancelled',
        error: { kind: 'cancelled', message: 'model call cancelled' },
      });
      expect(log).toEqual(['startRun', 'callModel 1', 'endRun']);
    });

    it('ends cancelled when the tool batch throws CancelledError', async () => {
      const { result, log } = await run({
        steps: [tools('a')],
        batch: () => {
          throw new CancelledError();
        },
      });
      expect(result).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
      expect(log).not.toContain('commitResults 1');
    });

    it('ends fenced with an inconsistent error when a commit meets a StaleWriterError', async () => {
      const stale = new StaleWriterError('s1', 1, 2);
      const { result } = await run({ steps: [tools('a'), final('never')], commits: [stale] });
      expect(result).toMatchObject({ status: 'fenced', outcome: 'incomplete', error: { kind: 'inconsistent', message: stale.message } });
      expect(result.error?.cause).toBe(stale);
    });

    it('ends fenced when startRun meets a StaleWriterError, without calling the model', async () => {
      const { result, log } = await run({ steps: [], startError: new StaleWriterError('s1', 1, 2) });
      expect(result.status).toBe('fenced');
      expect(log).toEqual(['startRun', 'endRun']);
    });

    it('ends failed with an execution error for any other throw', async () => {
      const boom = new Error('finalize exploded');
      const { result } = await run({ steps: [final('x')], finals: [boom] });
      expect(result).toMatchObject({ status: 'failed', outcome: 'failed', error: { kind: 'execution', message: 'finalize exploded' } });
      expect(result.error?.cause).toBe(boom);
    });

    it('reports checkpointCommitted false when endRun itself throws', async () => {
      const { result } = await run({ steps: [final('x')], endError: new Error('disk full') });
      expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'x', checkpointCommitted: false });
    });
  });

  describe('STOP_AFTER_ROUND', () => {
    it('during runningTools: commits the batch results, then stops without another model call', async () => {
      const gate = deferred<ToolBatchOutput>();
      const f = fakes({ steps: [tools('a', 'b'), final('never')], batch: () => gate.promise });
      const actor = createActor(runMachine.provide({ actors: f.actors }), { input: runInput() });
      actor.start();
      await waitFor(actor, (s) => s.matches('runningTools'));
      actor.send({ type: 'STOP_AFTER_ROUND' });
      expect(actor.getSnapshot().value).toBe('runningTools');
      gate.resolve([resultFor(call('a')), resultFor(call('b'))]);
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(f.log).toEqual(['startRun', 'callModel 1', 'commitIntent 1', 'toolBatch', 'commitResults 1', 'settleResults', 'endRun']);
      expect(f.inputs.commitResults[0]!.results.map((r) => r.callId)).toEqual(['a', 'b']);
      expect(snap.output).toMatchObject({ status: 'stopped', outcome: 'incomplete', steps: 1 });
    });

    it('during the model call: runs the batch it asks for, then stops', async () => {
      const gate = deferred<StepScript>();
      const f = fakes({ steps: [() => gate.promise, final('never')] });
      const actor = createActor(runMachine.provide({ actors: f.actors }), { input: runInput() });
      actor.start();
      await waitFor(actor, (s) => s.matches('callingModel'));
      actor.send({ type: 'STOP_AFTER_ROUND' });
      gate.resolve(tools('a'));
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(f.log).toEqual(['startRun', 'callModel 1', 'commitIntent 1', 'toolBatch', 'commitResults 1', 'settleResults', 'endRun']);
      expect(snap.output!.status).toBe('stopped');
    });

    it('lets a final answer already under way finish and be delivered', async () => {
      const gate = deferred<StepScript>();
      const f = fakes({ steps: [() => gate.promise] });
      const actor = createActor(runMachine.provide({ actors: f.actors }), { input: runInput() });
      actor.start();
      await waitFor(actor, (s) => s.matches('callingModel'));
      actor.send({ type: 'STOP_AFTER_ROUND' });
      gate.resolve(final('done anyway'));
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(snap.output).toMatchObject({ status: 'succeeded', finalMessage: 'done anyway' });
    });

    // DESIGN §4 item 10 ("…and then stops, starting no new model call"): a stop accepted
    // while the run is still `starting` (run/start being committed, no model call or batch under
    // way): the run ends `stopped` without calling the model.
    it('while starting: starts no model call', async () => {
      const gate = deferred<StartRunOutput>();
      const f = fakes({ steps: [tools('a'), final('never')], start: () => gate.promise });
      const actor = createActor(runMachine.provide({ actors: f.actors }), { input: runInput() });
      actor.start();
      expect(actor.getSnapshot().value).toBe('starting');
      actor.send({ type: 'STOP_AFTER_ROUND' });
      gate.resolve({ runStartSeq: 2 });
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(snap.output!.status).toBe('stopped');
      expect(f.inputs.callModel).toHaveLength(0);
    });
  });
});
