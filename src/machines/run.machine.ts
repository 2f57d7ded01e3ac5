import type { ToolCallOutput } from '../contracts/calls.js';
import type { ToolCallIntent } from '../contracts/calls.js';
import { and, assign, fromCallback, not, sendTo, setup, stateIn, type ActorRefFrom } from 'xstate';
import { isCancelledError, isStaleWriterError, ProtocolExhaustedError, STEP_SPENT } from '../contracts/errors.js';
import type { LoopBudget } from '../contracts/config.js';
import { addUsage, zeroUsage, type Message, type Usage } from '../contracts/message.js';
import type { ExecutionResult, Outcome, RunStatus } from '../contracts/requests.js';
import { addDecimal, spentBudget } from '../contracts/budget.js';
import { effect, type EffectReply, type EffectRequest } from '../actors/run-effects.js';
import type { PendingRequest } from '../contracts/events.js';
import type { StartRunInput } from '../actors/run-lifecycle.js';
import { toolBatchMachine, type ToolBatchDone, type ToolBatchInput } from './tool-batch.machine.js';

export interface RunInput {
  runId: string;
  attemptId: string;
  runEpoch: number;
  turn: number;
  kind: StartRunInput['kind'];
  messages: Message[];
  executionProfileFingerprint: string;
  budget: LoopBudget;
  maxProtocolCorrections: number;
  maxParallelTools: number;
  startedAt: number;
  /** Set for a `respond` attempt: the suspended batch and the answer to it. */
  resume?: ResumeInput;
  /** The follow-up input this run consumes (runId = inputId). */
  inputId?: string;
  /** The last step number already written by earlier attempts (a `continue` goes on after it). */
  startStep?: number;
  /** Seq of the run's first run/start, for a later attempt (compaction keeps the whole run). */
  runFirstSeq?: number;
  /** What the run's earlier attempts spent (a respond or continue): its budgets count per run. */
  spent?: { toolCalls: number; usage: Usage; cost: string; recoveries: number; corrections: number };
  /**
   * A `concludesTurn` result committed by an earlier attempt that stopped before its final/message:
   * a `continue` finalizes with its content (DESIGN §4 item 5), calling no model.
   */
  concluded?: string;
  /** A stop accepted before this attempt (it survives recovery). */
  stopRequested?: boolean;
  /** A detach or cancel asked for before the attempt had started. */
  detachRequested?: boolean;
  cancelRequested?: boolean;
}

/**
 * What a `respond` attempt resumes (the batch held back by an approval or a question), or what a
 * `continue` after a crash resolves (`recover`: tool calls whose intent is logged without result).
 */
export type ResumeInput =
  | { kind: 'answer'; step: number; batch: ToolCallIntent[]; pendingRequest: PendingRequest; answer: unknown; timedOut: boolean }
  | { kind: 'recover'; step: number; batch: ToolCallIntent[]; released?: Record<string, string[]> };

/** startRun's output: the run/start seq and, for a respond attempt, what to run or record. */
export interface StartRunOutput {
  runStartSeq: number;
  resumed?: { calls: ToolCallIntent[]; preset: ToolCallOutput[] };
}

export interface RunContext extends Omit<RunInput, 'messages'> {
  messages: Message[];
  runStartSeq: number;
  step: number;
  usage: Usage;
  stepUsage?: Usage;
  cost: string;
  toolCalls: number;
  recoveries: number;
  corrections: number;
  calls: ToolCallIntent[];
  /** Results decided without running (denied approvals, answered questions), merged by call order. */
  presetResults: ToolCallOutput[];
  /** Call ids of the batch in the model's order. */
  order: string[];
  pendingFinal?: { content: string; closeStep: boolean };
  stopRequested: boolean;
  cancelRequested: boolean;
  detachRequested: boolean;
  pendingRequest?: PendingRequest;
  end?: Pick<ExecutionResult, 'status' | 'outcome' | 'error' | 'budget' | 'blockedBy' | 'finalMessage' | 'finalMessageId'>;
  result?: ExecutionResult;
}

export type RunEvent = { type: 'STOP_AFTER_ROUND' } | { type: 'CANCEL' } | { type: 'DETACH' };

function endFor(error: unknown): NonNullable<RunContext['end']> {
  if (isCancelledError(error)) return { status: 'cancelled', outcome: 'cancelled', error: { kind: 'cancelled', message: (error as Error).message } };
  if (isStaleWriterError(error))
    return { status: 'fenced', outcome: 'incomplete', error: { kind: 'inconsistent', message: (error as Error).message, cause: error } };
  return {
    status: 'failed',
    outcome: 'failed',
    error: { kind: 'execution', message: (error as Error)?.message ?? String(error), cause: error },
  };
}

const ended = (status: RunStatus, outcome: Outcome, extra: Partial<NonNullable<RunContext['end']>> = {}) => ({ status, outcome, ...extra });

/**
 * One attempt of one run (DESIGN §3, §4): start → step loop (model step → tool batch → results)
 * → budget check → next step | final answer → delivery → run/end. Effects live in the actors
 * it invokes; the context holds ids, counters and the current batch's call descriptors.
 * @example
 * createActor(runMachine.provide({ actors: runActors(env) }), { input }).start()
 */
export const runMachine = setup({
  types: {
    input: {} as RunInput,
    context: {} as RunContext,
    events: {} as RunEvent | EffectReply | ToolBatchDone,
    output: {} as ExecutionResult,
  },
  actors: {
    // provided with runEffectsActor(ops): one long-lived actor per run performs every effect
    effects: fromCallback<EffectRequest>(({ receive, sendBack }) => {
      receive((req) => sendBack({ type: `${req.op}.error`, error: new Error('effects actor not provided') } as EffectReply));
    }),
    toolBatch: toolBatchMachine,
  },
  guards: {
    stopRequested: ({ context }) => context.stopRequested,
    cancelRequested: ({ context }) => context.cancelRequested,
    detachRequested: ({ context }) => context.detachRequested,
    budgetSpent: ({ context }) => spentBudget(context.budget, budgetUse(context), Date.now()) !== undefined,
  },
  actions: {
    /** Asks the run's effects actor for one operation (its reply is `<op>.done` or `<op>.error`). */
    request: sendTo('effects', (_, params: EffectRequest) => params),
    failWith: assign(({ context, event }) => {
      const error = (event as { error?: unknown }).error;
      // what the failed effect had spent and logged (a compaction's summary call) still counts
      const spent = error !== null && typeof error === 'object' ? (error as { [STEP_SPENT]?: { usage: Usage; cost?: string } })[STEP_SPENT] : undefined;
      return spent ? { ...addStepUsage(context, spent), end: endFor(error) } : { end: endFor(error) };
    }),
  },
}).createMachine({
  id: 'run',
  invoke: [
    { id: 'effects', src: 'effects' },
    { id: 'toolBatch', src: 'toolBatch', input: ({ context: c }): ToolBatchInput => ({ runId: c.runId, maxParallel: c.maxParallelTools }) },
  ],
  // Every key the machine ever assigns is declared here, even when undefined: an assign that adds
  // a key past V8's fast-property limit turns the context into a dictionary, and every later
  // assign (a full copy of the context) then costs ≈ 10× more.
  context: ({ input }) => ({
    ...input,
    resume: input.resume,
    inputId: input.inputId,
    startStep: input.startStep,
    runFirstSeq: input.runFirstSeq,
    spent: input.spent,
    concluded: input.concluded,
    stepUsage: undefined,
    pendingFinal: undefined,
    pendingRequest: undefined,
    end: undefined,
    result: undefined,
    runStartSeq: 0,
    step: input.startStep ?? 0,
    usage: input.spent?.usage ?? zeroUsage(),
    cost: input.spent?.cost ?? '0',
    toolCalls: input.spent?.toolCalls ?? 0,
    recoveries: input.spent?.recoveries ?? 0,
    corrections: input.spent?.corrections ?? 0,
    calls: [],
    presetResults: [],
    order: [],
    stopRequested: input.stopRequested ?? false,
    cancelRequested: input.cancelRequested ?? false,
    detachRequested: input.detachRequested ?? false,
  }),
  on: {
    // the batch actor errors only while it runs a batch; anywhere but while ending, the run ends on it
    'xstate.error.actor.toolBatch': { guard: and([not(stateIn('ending')), not(stateIn('done'))]), target: '.ending', actions: 'failWith' },
    STOP_AFTER_ROUND: { actions: assign({ stopRequested: true }) },
    CANCEL: { actions: assign({ cancelRequested: true }) },
    DETACH: { actions: assign({ detachRequested: true }) },
  },
  initial: 'starting',
  states: {
    starting: {
      entry: {
        type: 'request',
        params: ({ context: c }) =>
          effect('startRun', {
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
          }),
      },
      on: {
        'startRun.done': [
          // a respond attempt: run (or record) the batch that was held back, in its own step
          {
            guard: ({ event }) => (event.output.resumed?.calls.length ?? 0) > 0,
            target: 'runningTools',
            actions: assign(({ context, event }) => resumedContext(context, event.output)),
          },
          {
            guard: ({ event }) => event.output.resumed !== undefined,
            target: 'committingResults',
            actions: assign(({ context, event }) => resumedContext(context, event.output)),
          },
          // the run's answer was concluded by a tool before the attempt stopped: finalize with it, as the
          // live run does (a concluded answer goes to finalizing before any stop, cancel or budget check)
          {
            guard: ({ context }) => context.concluded !== undefined,
            target: 'finalizing',
            actions: assign({
              messages: [],
              runStartSeq: ({ event }) => event.output.runStartSeq,
              pendingFinal: ({ context }) => ({ content: context.concluded!, closeStep: false }),
            }),
          },
          // a stop, cancel or detach before any model call: end now, starting none
          { guard: 'cancelRequested', target: 'ending', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output.runStartSeq, end: ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled before the first model call' } }) }) },
          { guard: 'detachRequested', target: 'ending', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output.runStartSeq, end: ended('detached', 'incomplete') }) },
          { guard: 'stopRequested', target: 'ending', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output.runStartSeq, end: ended('stopped', 'incomplete') }) },
          // a later attempt inherits what the run spent: a spent budget calls no model again
          {
            guard: 'budgetSpent',
            target: 'ending',
            actions: assign(({ context, event }) => ({
              messages: [],
              runStartSeq: event.output.runStartSeq,
              end: ended('budget_exhausted', 'incomplete', { budget: spentBudget(context.budget, budgetUse(context), Date.now())!.budget }),
            })),
          },
          { target: 'stepping', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output.runStartSeq, step: ({ context }) => context.step + 1 }) },
        ],
        'startRun.error': { target: 'ending', actions: 'failWith' },
      },
    },
    // every transition into stepping counts the new step in its own assign (no entry assign)
    stepping: {
      entry: {
        type: 'request',
        params: ({ context: c }) =>
          effect('modelStep', {
            runId: c.runId,
            runStartSeq: c.runStartSeq,
            at: at(c),
            corrections: c.corrections,
            ...(c.budget.maxOutputTokens !== undefined ? { outputTokensLeft: Math.max(1, c.budget.maxOutputTokens - c.usage.outputTokens) } : {}),
          }),
      },
      on: {
        'modelStep.done': [
          {
            // a cancel during the model step: no final answer is committed (tool calls go on to
            // the batch, which skips every call not yet started; the model step itself does not
            // suspend once cancelled)
            guard: ({ context, event }) => context.cancelRequested && event.output.kind === 'final',
            target: 'ending',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              end: ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled (requestCancel or kill switch)' } }),
            })),
          },
          {
            guard: ({ event }) => event.output.kind === 'tools',
            target: 'runningTools',
            // every field written out: `{ ...addStepUsage(), calls, … }` (a spread followed by new
            // keys) takes V8's slow object-literal path, ≈ 3 µs here
            actions: assign(({ context, event }) => {
              const out = event.output as { calls: ToolCallIntent[]; usage?: Usage; cost?: string };
              return {
                usage: addUsage(context.usage, out.usage),
                stepUsage: out.usage,
                cost: out.cost ? addDecimal(context.cost, out.cost) : context.cost,
                calls: out.calls,
                order: out.calls.map((c) => c.callId),
                presetResults: [],
                toolCalls: context.toolCalls + out.calls.length,
              };
            }),
          },
          {
            guard: ({ event }) => event.output.kind === 'final',
            target: 'finalizing',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              pendingFinal: { content: (event.output as { content: string }).content, closeStep: true },
            })),
          },
          {
            guard: ({ context, event }) => event.output.kind === 'rejected' && context.corrections + 1 > context.maxProtocolCorrections,
            target: 'ending',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              corrections: context.corrections + 1,
              end: ended('failed', 'failed', {
                error: { kind: 'execution', message: new ProtocolExhaustedError(context.maxProtocolCorrections).message, cause: new ProtocolExhaustedError(context.maxProtocolCorrections) },
              }),
            })),
          },
          {
            guard: ({ event }) => event.output.kind === 'rejected',
            target: 'checkingBudget',
            actions: assign(({ context, event }) => ({ ...addStepUsage(context, event.output), corrections: context.corrections + 1 })),
          },
          {
            guard: ({ event }) => event.output.kind === 'stopped',
            target: 'ending',
            actions: assign(({ context, event }) => ({ ...addStepUsage(context, event.output), end: ended('stopped', 'incomplete') })),
          },
          {
            guard: ({ event }) => event.output.kind === 'suspend',
            target: 'ending',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              pendingRequest: (event.output as { pendingRequest: PendingRequest }).pendingRequest,
              end: ended('suspended', 'suspended'),
            })),
          },
          {
            target: 'ending',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              end: ended('blocked', 'incomplete', { blockedBy: (event.output as { locks: string[] }).locks }),
            })),
          },
        ],
        'modelStep.error': { target: 'ending', actions: 'failWith' },
      },
    },
    runningTools: {
      entry: sendTo('toolBatch', ({ context }) => ({ type: 'batch.run' as const, calls: context.calls })),
      on: {
        // no assign: committingResults' entry reads the results from this event
        'batch.done': { target: 'committingResults' },
      },
    },
    committingResults: {
      entry: {
        type: 'request',
        params: ({ context: c, event }) =>
          effect('commitResults', {
            at: at(c),
            results: inCallOrder(c, event.type === 'batch.done' ? event.results : []),
            ...(c.stepUsage ? { usage: c.stepUsage } : {}),
          }),
      },
      on: {
        'commitResults.done': [
          {
            guard: ({ event }) => event.output.concluded !== undefined,
            target: 'finalizing',
            actions: assign(({ context, event }) => ({
              calls: [],
              presetResults: [],
              pendingFinal: { content: event.output.concluded!, closeStep: false },
              recoveries: context.recoveries + event.output.rejections,
            })),
          },
          // a stop, cancel, detach or spent budget: checkingBudget says which (and ends the run)
          {
            guard: ({ context, event }) => mustStop(context, context.recoveries + event.output.rejections),
            target: 'checkingBudget',
            actions: assign(({ context, event }) => ({ calls: [], presetResults: [], recoveries: context.recoveries + event.output.rejections })),
          },
          // the usual case, straight to the next step: the checks of checkingBudget, without its microstep
          {
            target: 'stepping',
            actions: assign(({ context, event }) => ({ calls: [], presetResults: [], recoveries: context.recoveries + event.output.rejections, step: context.step + 1 })),
          },
        ],
        'commitResults.error': { target: 'ending', actions: 'failWith' },
      },
    },
    checkingBudget: {
      always: [
        { guard: 'cancelRequested', target: 'ending', actions: assign({ end: ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled (requestCancel or kill switch)' } }) }) },
        // a spent budget settles the run before a detach or stop could leave it resumable
        {
          guard: 'budgetSpent',
          target: 'ending',
          actions: assign(({ context }) => ({ end: ended('budget_exhausted', 'incomplete', { budget: spentBudget(context.budget, budgetUse(context), Date.now())!.budget }) })),
        },
        { guard: 'detachRequested', target: 'ending', actions: assign({ end: ended('detached', 'incomplete') }) },
        { guard: 'stopRequested', target: 'ending', actions: assign({ end: ended('stopped', 'incomplete') }) },
        { target: 'stepping', actions: assign({ step: ({ context }) => context.step + 1 }) },
      ],
    },
    finalizing: {
      entry: {
        type: 'request',
        params: ({ context: c }) =>
          effect('finalize', {
            runId: c.runId,
            at: at(c),
            content: c.pendingFinal!.content,
            closeStep: c.pendingFinal!.closeStep,
            ...(c.stepUsage && c.pendingFinal!.closeStep ? { usage: c.stepUsage } : {}),
          }),
      },
      on: {
        'finalize.done': [
          {
            guard: ({ event }) => event.output.kind === 'rejected',
            target: 'checkingBudget',
            actions: assign(({ context }) => ({ recoveries: context.recoveries + 1, pendingFinal: undefined })),
          },
          {
            guard: ({ event }) => event.output.kind === 'delivered',
            target: 'ending',
            actions: assign(({ context, event }) => ({
              end: ended('succeeded', 'completed', { finalMessage: context.pendingFinal!.content, finalMessageId: (event.output as { finalMessageId: string }).finalMessageId }),
            })),
          },
          {
            target: 'ending',
            actions: assign(({ context, event }) => ({
              end: ended('delivery_unknown', 'failed', {
                finalMessage: context.pendingFinal!.content,
                finalMessageId: (event.output as { finalMessageId: string }).finalMessageId,
                error: { kind: 'finalization', message: (event.output as { reason: string }).reason },
              }),
            })),
          },
        ],
        'finalize.error': { target: 'ending', actions: 'failWith' },
      },
    },
    ending: {
      entry: { type: 'request', params: ({ context: c }) => effect('endRun', { turn: c.turn, step: c.step, attempt: c.runEpoch, result: resultOf(c), started: c.runStartSeq > 0 }) },
      on: {
        'endRun.done': { target: 'done', actions: assign({ result: ({ event }) => event.output }) },
        'endRun.error': { target: 'done', actions: assign(({ context }) => ({ result: { ...resultOf(context), checkpointCommitted: false } })) },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.result!,
});

export type RunActorRef = ActorRefFrom<typeof runMachine>;

function resumedContext(c: RunContext, out: StartRunOutput) {
  const r = out.resumed!;
  return {
    messages: [],
    runStartSeq: out.runStartSeq,
    step: c.resume!.step,
    calls: r.calls,
    presetResults: r.preset,
    order: c.resume!.batch.map((b) => b.callId),
    // approved calls are new; a recovered call's tool/call was counted with the run's spending
    toolCalls: c.toolCalls + (c.resume!.kind === 'answer' ? r.calls.length : 0),
  };
}

/** Batch results and preset results, in the order the model asked for the calls. */
function inCallOrder(c: RunContext, results: ToolCallOutput[]): ToolCallOutput[] {
  // the usual case: no preset results, and the batch answered in call order already
  if (c.presetResults.length === 0 && results.length === c.order.length && results.every((r, i) => r.callId === c.order[i])) return results;
  const all = [...c.presetResults, ...results];
  const pos = new Map(c.order.map((id, i) => [id, i]));
  return all.sort((a, b) => (pos.get(a.callId) ?? 0) - (pos.get(b.callId) ?? 0));
}

function at(c: RunContext) {
  return { turn: c.turn, step: c.step, attempt: c.runEpoch };
}

function addStepUsage(c: RunContext, out: { usage?: Usage; cost?: string }) {
  return {
    usage: addUsage(c.usage, out.usage),
    stepUsage: out.usage,
    cost: out.cost ? addDecimal(c.cost, out.cost) : c.cost,
  };
}

/** Whether checkingBudget would end the run (a cancel, detach or stop request, a spent budget) once `recoveries` are counted. */
function mustStop(c: RunContext, recoveries: number): boolean {
  return c.cancelRequested || c.detachRequested || c.stopRequested || spentBudget(c.budget, budgetUse(c, recoveries), Date.now()) !== undefined;
}

function budgetUse(c: RunContext, recoveries = c.recoveries) {
  return { steps: c.step, toolCalls: c.toolCalls, usage: c.usage, cost: c.cost, recoveries, startedAt: c.startedAt };
}

function resultOf(c: RunContext): ExecutionResult {
  const end = c.end ?? { status: 'failed' as const, outcome: 'failed' as const };
  return {
    runId: c.runId,
    attemptId: c.attemptId,
    outcome: end.outcome,
    status: end.status,
    ...(end.finalMessage !== undefined ? { finalMessage: end.finalMessage } : {}),
    ...(end.finalMessageId ? { finalMessageId: end.finalMessageId } : {}),
    ...(end.error ? { error: end.error } : {}),
    ...(end.budget ? { budget: end.budget } : {}),
    ...(end.blockedBy ? { blockedBy: end.blockedBy } : {}),
    ...(c.pendingRequest && end.status === 'suspended' ? { pendingRequest: c.pendingRequest } : {}),
    checkpointCommitted: true,
    historyConsistent: true,
    deliveryErrors: [],
    usage: c.usage,
    steps: c.step,
    toolCalls: c.toolCalls,
    cost: c.cost,
    recoveries: c.recoveries,
  };
}
