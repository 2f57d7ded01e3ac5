import { notProvided } from './not-provided.js';
import { assign, fromPromise, setup, type ActorRefFrom } from 'xstate';
import type { ExecutionResult } from '../contracts/requests.js';
import type { CallModelInput, CallModelOutput } from '../actors/call-model.js';
import type { CommitIntentInput, CommitIntentOutput } from '../actors/commit-intent.js';
import type { CommitResultsInput, CommitResultsOutput } from '../actors/commit-results.js';
import type { EndRunInput } from '../actors/end-run.js';
import type { CancelChildrenInput, ChildOfCall } from '../actors/run-children.js';
import type { DeliverFinalInput, DeliverFinalOutput, FinalAnswerInput, VerifyFinalOutput } from '../actors/final-answer.js';
import type { PrepareContextInput, PrepareContextOutput } from '../actors/prepare-context.js';
import type { StartRunInput, StartRunOutput } from '../actors/start-run.js';
import { toolBatchMachine, type ToolBatchInput } from './tool-batch.machine.js';
import { initialContext, type RunContext, type RunEvent, type RunInput } from './run-context.js';
import { runActions } from './run-actions.js';
import { runGuards } from './run-guards.js';
import {
  batchBudget,
  budgetLeftOf,
  cancelChildrenInput,
  deliverInput,
  ended,
  endRunInput,
  finalInput,
  inCallOrder,
  positionOf,
} from './run-decisions.js';

export type { ResumeInput, StartRunOutput } from '../actors/start-run.js';
export type { RunContext, RunEvent, RunInput } from './run-context.js';

/**
 * A cancel while the step's model call is prepared or made: the call is stopped (its actor's
 * signal aborts) and no answer of it is committed; the run ends once the step's results landed.
 */
const MODEL_CALL_CANCELLED = { target: '#run.settlingResults', actions: ['requestCancel', 'endModelCallCancelled'] } as const;
/**
 * A model call (the step's, a summary's) failed: its rate-limit wait outlasted maxDurationMs, or
 * was ended by a stop after the round (nothing sent: the run stops), or the run fails.
 */
const MODEL_CALL_FAILED = [
  { guard: 'rateLimitDeadline', target: '#run.closing', actions: ['spendDuration', 'endBudgetSpent'] },
  { guard: 'stoppedWaiting', target: '#run.closing', actions: 'endStopped' },
  { target: '#run.closing', actions: 'failWith' },
] as const;
/** A phase's actor failed: the run ends with the error it threw (typed by `endFor`). */
const RUN_FAILED = { target: '#run.closing', actions: 'failWith' } as const;

/**
 * One attempt of one run (DESIGN §3, §4), one named actor per phase: `startRun` → step loop
 * (`callModel` (after `prepareContext` when steers wait or the context is too large) →
 * `commitIntent` → `toolBatch` → `commitResults`, which the next `callModel` does not wait
 * for) → budget check → next step | `verifyFinal` → `commitFinal` → `deliverFinal` → `endRun`; `suspended`
 * outcomes (approvals, questions — the run's own, or a child's that left an agent call without a
 * result) end the attempt. Each actor is registered here and swapped with
 * `.provide({ actors })`; guards and actions are named (the actions are run-actions.ts'), decisions
 * are the pure functions of run-decisions.ts. Cancel, stop and detach come in as events: a cancel
 * stops the model call under way (its actor's signal aborts) and reaches the tool batch's calls; a
 * stop or detach is honoured at the next safe point, and reaches the batch's running calls too (an
 * agent call's child follows it).
 * @example
 * createActor(runMachine.provide({ actors: { callModel: callModelActor(services), … } }), { input }).start()
 */
export const runMachine = setup({
  types: {
    input: {} as RunInput,
    context: {} as RunContext,
    events: {} as RunEvent,
    output: {} as ExecutionResult,
  },
  actors: {
    startRun: fromPromise<StartRunOutput, StartRunInput>(notProvided('startRun')),
    prepareContext: fromPromise<PrepareContextOutput, PrepareContextInput>(notProvided('prepareContext')),
    callModel: fromPromise<CallModelOutput, CallModelInput>(notProvided('callModel')),
    commitIntent: fromPromise<CommitIntentOutput, CommitIntentInput>(notProvided('commitIntent')),
    toolBatch: toolBatchMachine,
    commitResults: fromPromise<CommitResultsOutput, CommitResultsInput>(notProvided('commitResults')),
    /**
     * Waits for the step's results commit (started by commitResults) to land; fails with its error.
     * The default has nothing to wait for.
     */
    settleResults: fromPromise<void, void>(async () => {}),
    verifyFinal: fromPromise<VerifyFinalOutput, FinalAnswerInput>(notProvided('verifyFinal')),
    commitFinal: fromPromise<{ finalMessageId: string }, FinalAnswerInput>(notProvided('commitFinal')),
    deliverFinal: fromPromise<DeliverFinalOutput, DeliverFinalInput>(notProvided('deliverFinal')),
    /** Ends the open runs of a cancelled run's children, before its end commits; the default finds none. */
    cancelChildren: fromPromise<ChildOfCall[], CancelChildrenInput>(async () => []),
    endRun: fromPromise<ExecutionResult, EndRunInput>(notProvided('endRun')),
    /** Resolves (with the time) when maxDurationMs runs out, on the runtime's clock; never without that budget. */
    deadline: fromPromise<number, { at?: number }>(() => new Promise<number>(() => {})),
  },
  guards: runGuards,
  actions: runActions,
}).createMachine({
  id: 'run',
  context: ({ input }) => initialContext(input),
  on: {
    STOP_AFTER_ROUND: { actions: 'requestStop' },
    CANCEL: { actions: 'requestCancel' },
    DETACH: { actions: 'requestDetach' },
    'model.attemptCounted': { actions: 'countAttempt' },
  },
  // the maxDurationMs deadline, served by a timer actor on the runtime's clock
  invoke: {
    src: 'deadline',
    input: ({ context }) => (context.budget.maxDurationMs === undefined ? {} : { at: context.startedAt + context.budget.maxDurationMs }),
    onDone: { actions: assign({ durationSpentAt: ({ event }) => event.output }) },
  },
  initial: 'starting',
  states: {
    starting: {
      invoke: {
        src: 'startRun',
        input: ({ context: c }): StartRunInput => ({
          runId: c.runId,
          attemptId: c.attemptId,
          runEpoch: c.runEpoch,
          turn: c.turn,
          kind: c.kind,
          messages: c.messages,
          executionProfileFingerprint: c.executionProfileFingerprint,
          ...(c.resume ? { resume: c.resume } : {}),
          ...(c.inputId ? { inputId: c.inputId } : {}),
          ...(c.runFirstSeq !== undefined ? { runFirstSeq: c.runFirstSeq } : {}),
          ...(c.offered ? { tools: c.offered.tools } : {}),
          ...(c.output ? { output: c.output } : {}),
          ...(c.recoveredReservation ? { recoveredReservation: c.recoveredReservation } : {}),
          ...(c.cancelRequested ? { cancelled: true } : {}),
          ...(c.cancelToRecord !== undefined ? { cancelToRecord: c.cancelToRecord } : {}),
          ...(c.cancelRecordId !== undefined ? { cancelRecordId: c.cancelRecordId } : {}),
        }),
        onDone: [
          // a respond attempt: run (or record) the batch that was held back, in its own step
          { guard: 'resumedWithCalls', target: 'runningTools', actions: 'resumeBatch' },
          { guard: 'resumedWithResultsOnly', target: 'committingResults', actions: 'resumeBatch' },
          // the run's answer was concluded by a tool before the attempt stopped: finalize with it, as
          // the live run does (a concluded answer goes to finalizing before any stop, cancel or budget)
          { guard: 'concludedBefore', target: 'verifyingFinal', actions: ['recordStart', 'finalizeConcluded'] },
          // a stop, cancel or detach before any model call: end now, starting none
          {
            guard: 'cancelRequested',
            target: '#run.closing',
            actions: [
              'recordStart',
              assign({
                end: () =>
                  ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled before the first model call' } }),
              }),
            ],
          },
          { guard: 'detachRequested', target: '#run.closing', actions: ['recordStart', 'endDetached'] },
          { guard: 'stopRequested', target: '#run.closing', actions: ['recordStart', 'endStopped'] },
          // a later attempt inherits what the run spent: a spent budget calls no model again
          { guard: 'budgetSpent', target: '#run.closing', actions: ['recordStart', 'endBudgetSpent'] },
          { target: 'callingModel', actions: ['recordStart', 'nextStep'] },
        ],
        onError: RUN_FAILED,
      },
    },
    preparingContext: {
      invoke: {
        src: 'prepareContext',
        input: ({ context: c }): PrepareContextInput => ({
          at: positionOf(c),
          runStartSeq: c.runStartSeq,
          ...(budgetLeftOf(c) ? { budgetLeft: budgetLeftOf(c)! } : {}),
          ...(c.budget.maxDurationMs !== undefined ? { deadlineAt: c.startedAt + c.budget.maxDurationMs } : {}),
        }),
        onDone: [
          // a summary call is reserved as any model call: one the budgets cannot hold is not made
          { guard: 'summaryUnaffordable', target: '#run.closing', actions: ['countCompaction', 'endSummaryRefused'] },
          { guard: 'pricingFailed', target: '#run.closing', actions: ['countCompaction', 'failPricing'] },
          { guard: 'contextTooLarge', target: '#run.closing', actions: ['countCompaction', 'failCapacity'] },
          // DESIGN §4 item 10: a stop accepted before this step's model call starts no new model call
          { guard: 'stopRequested', target: '#run.closing', actions: ['countCompaction', 'endStopped'] },
          { target: 'callingModel', actions: ['countCompaction', 'markPrepared'] },
        ],
        onError: MODEL_CALL_FAILED,
      },
      on: { CANCEL: MODEL_CALL_CANCELLED },
    },
    callingModel: {
      invoke: {
        src: 'callModel',
        input: ({ context: c }): CallModelInput => ({
          at: positionOf(c),
          ...(c.contextPrepared ? { prepared: true } : {}),
          ...(budgetLeftOf(c) ? { budgetLeft: budgetLeftOf(c)! } : {}),
          ...(c.offered ? { offered: c.offered } : {}),
          ...(c.output ? { output: c.output } : {}),
          ...(c.budget.maxDurationMs !== undefined ? { deadlineAt: c.startedAt + c.budget.maxDurationMs } : {}),
        }),
        onDone: [
          // steers wait or the context is too large: prepared first, then called (DESIGN §4 items 1, 9)
          { guard: 'contextUnprepared', target: 'preparingContext' },
          // its worst case would cross a budget: no call started, the run ends naming that budget
          { guard: 'callUnaffordable', target: 'settlingResults', actions: ['countModelCall', 'endBudgetRefused'] },
          { guard: 'askedForTools', target: 'committingIntent', actions: ['countModelCall', 'keepToolCalls'] },
          // no answer (refused under an output schema, filtered out): counted, then the run fails with it
          { guard: 'answerRefused', target: '#run.closing', actions: ['countModelCall', 'failRefused'] },
          { target: 'verifyingFinal', actions: ['countModelCall', 'keepAnswer'] },
        ],
        onError: MODEL_CALL_FAILED,
      },
      on: { CANCEL: MODEL_CALL_CANCELLED },
    },
    committingIntent: {
      invoke: {
        src: 'commitIntent',
        input: ({ context: c }): CommitIntentInput => ({
          runId: c.runId,
          at: positionOf(c),
          toolCalls: c.asked!.toolCalls,
          finishReason: c.asked!.finishReason,
          ...(c.stepUsage ? { usage: c.stepUsage } : {}),
          cancelRequested: c.cancelRequested,
          ...(c.offered ? { tools: c.offered.tools } : {}),
        }),
        onDone: [
          { guard: 'intentRejected', target: 'checkingCorrections', actions: 'countCorrection' },
          { guard: 'intentBlocked', target: '#run.closing', actions: 'endBlocked' },
          // a cancel that came while the request was committed: the run settles, never waiting on it
          { guard: 'cancelledWhileSuspending', target: '#run.closing', actions: 'endSuspendCancelled' },
          { guard: 'intentSuspended', target: '#run.closing', actions: 'endSuspended' },
          { target: 'runningTools', actions: 'keepIntents' },
        ],
        onError: RUN_FAILED,
      },
    },
    checkingCorrections: {
      always: [{ guard: 'correctionsExhausted', target: '#run.closing', actions: 'endProtocolExhausted' }, { target: 'checkingBudget' }],
    },
    runningTools: {
      invoke: {
        id: 'toolBatch',
        src: 'toolBatch',
        input: ({ context: c }): ToolBatchInput => ({
          runId: c.runId,
          maxParallel: c.maxParallelTools,
          calls: c.calls,
          cancelled: c.cancelRequested,
          ...(c.offered ? { tools: c.offered.tools } : {}),
          budget: batchBudget(c),
          ...(c.stopRequested || c.detachRequested
            ? { control: [...(c.stopRequested ? ['stop' as const] : []), ...(c.detachRequested ? ['detach' as const] : [])] }
            : {}),
        }),
        onDone: { target: 'committingResults', actions: 'keepBatchResults' },
        onError: RUN_FAILED,
      },
      // control reaches the running calls: a cancel aborts them, a stop or detach reaches an agent call's child
      on: {
        CANCEL: { actions: ['requestCancel', 'cancelBatch'] },
        STOP_AFTER_ROUND: { actions: ['requestStop', 'stopBatch'] },
        DETACH: { actions: ['requestDetach', 'detachBatch'] },
      },
    },
    committingResults: {
      invoke: {
        src: 'commitResults',
        input: ({ context: c, self }): CommitResultsInput => ({
          at: positionOf(c),
          results: inCallOrder(c.order, c.presetResults, c.batchResults),
          ...(c.stepUsage ? { usage: c.stepUsage } : {}),
          intents: c.calls,
          // read when it decides whether the run waits on a child's request: a cancel may come meanwhile
          cancelRequested: () => self.getSnapshot().context.cancelRequested,
        }),
        onDone: [
          // agent calls left without a result: the run waits for a child's request, or is detached
          // (or, asked to cancel meanwhile, settles cancelled at settlingResults)
          { guard: 'callsUnsettled', target: 'settlingResults', actions: ['endUnsettled', 'countRejections', 'takeHandoff'] },
          { guard: 'toolConcluded', target: 'settlingResults', actions: ['countRejections', 'takeHandoff', 'finalizeConcludedByTool'] },
          { target: 'checkingBudget', actions: ['countRejections', 'takeHandoff'] },
        ],
        onError: RUN_FAILED,
      },
    },
    /**
     * After every step (DESIGN §4 item 8): a cancel, a spent budget, a detach or a stop ends the
     * run, once the step's results have landed; else the next model call starts at once, over the
     * results still landing (it fails with their commit's error if that fails).
     */
    checkingBudget: {
      always: [
        { guard: 'cancelRequested', target: 'settlingResults', actions: 'endCancelled' },
        // a spent budget settles the run before a detach or stop could leave it resumable
        { guard: 'budgetSpent', target: 'settlingResults', actions: 'endBudgetSpent' },
        { guard: 'detachRequested', target: 'settlingResults', actions: 'endDetached' },
        { guard: 'stopRequested', target: 'settlingResults', actions: 'endStopped' },
        { target: 'callingModel', actions: 'nextStep' },
      ],
    },
    /**
     * The step's results commit lands (or fails the run, as it would have at committingResults)
     * before the run ends or finalizes a concluded answer.
     */
    settlingResults: {
      invoke: {
        src: 'settleResults',
        onDone: [
          // a cancel that came while the results landed settles a run that would have been left
          // open (waiting for a child's request, or detached) — the last point before its end commits
          { guard: 'cancelledWhileOpen', target: '#run.closing', actions: 'endCancelled' },
          { guard: 'endDecided', target: '#run.closing' },
          { target: 'verifyingFinal' },
        ],
        onError: RUN_FAILED,
      },
    },
    verifyingFinal: {
      invoke: {
        src: 'verifyFinal',
        input: ({ context }) => finalInput(context),
        onDone: [
          { guard: 'outputRejected', target: 'checkingCorrections', actions: 'countOutputCorrection' },
          { guard: 'finalRejected', target: 'checkingBudget', actions: 'countFinalRejection' },
          // a cancel that came while the answer was verified: no final is committed (once it is, it
          // is delivered whatever happens next — the write-ahead rule)
          {
            guard: 'cancelRequested',
            target: '#run.closing',
            actions: assign({
              end: () =>
                ended('cancelled', 'cancelled', {
                  error: { kind: 'cancelled', message: 'cancelled before the final answer was committed' },
                }),
            }),
          },
          { target: 'committingFinal', actions: 'keepOutput' },
        ],
        onError: RUN_FAILED,
      },
    },
    committingFinal: {
      invoke: {
        src: 'commitFinal',
        input: ({ context }) => finalInput(context),
        onDone: { target: 'delivering', actions: 'keepFinalMessageId' },
        onError: RUN_FAILED,
      },
    },
    delivering: {
      invoke: {
        src: 'deliverFinal',
        input: ({ context }) => deliverInput(context),
        onDone: [
          { guard: 'delivered', target: '#run.closing', actions: 'endDelivered' },
          { target: '#run.closing', actions: 'endDeliveryUnknown' },
        ],
        onError: RUN_FAILED,
      },
    },
    /** The end is decided: a cancelled run first cancels its agent calls' open children (docs/agents.md, "Control"). */
    closing: { always: [{ guard: 'endsCancelled', target: 'cancellingChildren' }, { target: 'ending' }] },
    cancellingChildren: {
      invoke: {
        src: 'cancelChildren',
        input: ({ context }) => cancelChildrenInput(context),
        onDone: { target: 'ending', actions: 'keepChildren' },
        onError: { target: 'ending' },
      },
    },
    ending: {
      invoke: {
        src: 'endRun',
        input: ({ context }) => endRunInput(context),
        onDone: { target: 'done', actions: 'keepResult' },
        onError: { target: 'done', actions: 'keepUncommittedResult' },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.result!,
});

export type RunActorRef = ActorRefFrom<typeof runMachine>;

/** The run's states where its end is decided (a final committed, or the end committed): a cancel changes nothing. */
export const PAST_CANCEL: ReadonlySet<string> = new Set(['committingFinal', 'delivering', 'cancellingChildren', 'ending', 'done']);
