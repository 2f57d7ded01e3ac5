import { assign, fromPromise, setup, type ActorRefFrom } from 'xstate';
import { isCancelledError, isStaleWriterError, ProtocolExhaustedError } from '../contracts/errors.js';
import type { LoopBudget } from '../contracts/config.js';
import { addUsage, zeroUsage, type Message, type Usage } from '../contracts/message.js';
import type { ExecutionResult, Outcome, RunStatus } from '../contracts/requests.js';
import { addDecimal, spentBudget } from '../actors/budget.js';
import type { CommitResultsInput, CommitResultsOutput } from '../actors/commit-results.js';
import type { FinalizeInput, FinalizeOutput } from '../actors/finalize.js';
import type { CallDescr, ModelStepInput, ModelStepOutput } from '../actors/model-step.js';
import type { EndRunInput, StartRunInput } from '../actors/run-lifecycle.js';
import type { ToolCallOutput } from '../actors/tool-call.js';
import { toolBatchMachine, type ToolBatchInput } from './tool-batch.machine.js';

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
  calls: CallDescr[];
  results: ToolCallOutput[];
  pendingFinal?: { content: string; closeStep: boolean };
  stopRequested: boolean;
  end?: Pick<ExecutionResult, 'status' | 'outcome' | 'error' | 'budget' | 'blockedBy' | 'finalMessage' | 'finalMessageId'>;
  result?: ExecutionResult;
}

export type RunEvent = { type: 'STOP_AFTER_ROUND' } | { type: 'NOW'; now: number };

const notProvided = <O, I>(name: string) =>
  fromPromise<O, I>(async () => {
    throw new Error(`${name} actor not provided`);
  });

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
    events: {} as RunEvent,
    output: {} as ExecutionResult,
  },
  actors: {
    startRun: notProvided<number, StartRunInput>('startRun'),
    modelStep: notProvided<ModelStepOutput & { cost?: string }, ModelStepInput>('modelStep'),
    toolBatch: toolBatchMachine,
    commitResults: notProvided<CommitResultsOutput, CommitResultsInput>('commitResults'),
    finalize: notProvided<FinalizeOutput, FinalizeInput>('finalize'),
    endRun: notProvided<ExecutionResult, EndRunInput>('endRun'),
  },
  guards: {
    stopRequested: ({ context }) => context.stopRequested,
    budgetSpent: ({ context }) => spentBudget(context.budget, budgetUse(context), Date.now()) !== undefined,
  },
  actions: {
    failWith: assign(({ event }) => ({ end: endFor((event as { error?: unknown }).error) })),
  },
}).createMachine({
  id: 'run',
  context: ({ input }) => ({
    ...input,
    runStartSeq: 0,
    step: 0,
    usage: zeroUsage(),
    cost: '0',
    toolCalls: 0,
    recoveries: 0,
    corrections: 0,
    calls: [],
    results: [],
    stopRequested: false,
  }),
  on: { STOP_AFTER_ROUND: { actions: assign({ stopRequested: true }) } },
  initial: 'starting',
  states: {
    starting: {
      invoke: {
        src: 'startRun',
        input: ({ context: c }) => ({
          runId: c.runId,
          attemptId: c.attemptId,
          runEpoch: c.runEpoch,
          turn: c.turn,
          kind: c.kind,
          messages: c.messages,
          executionProfileFingerprint: c.executionProfileFingerprint,
        }),
        onDone: [
          // a stop accepted before any model call: stop now, starting none
          { guard: 'stopRequested', target: 'ending', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output, end: ended('stopped', 'incomplete') }) },
          { target: 'stepping', actions: assign({ messages: [], runStartSeq: ({ event }) => event.output }) },
        ],
        onError: { target: 'ending', actions: 'failWith' },
      },
    },
    stepping: {
      entry: assign({ step: ({ context }) => context.step + 1 }),
      invoke: {
        src: 'modelStep',
        input: ({ context: c }) => ({ runId: c.runId, runStartSeq: c.runStartSeq, at: at(c), corrections: c.corrections }),
        onDone: [
          {
            guard: ({ event }) => event.output.kind === 'tools',
            target: 'runningTools',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              calls: (event.output as { calls: CallDescr[] }).calls,
              toolCalls: context.toolCalls + (event.output as { calls: CallDescr[] }).calls.length,
            })),
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
            target: 'ending',
            actions: assign(({ context, event }) => ({
              ...addStepUsage(context, event.output),
              end: ended('blocked', 'incomplete', { blockedBy: (event.output as { locks: string[] }).locks }),
            })),
          },
        ],
        onError: { target: 'ending', actions: 'failWith' },
      },
    },
    runningTools: {
      invoke: {
        src: 'toolBatch',
        input: ({ context: c }): ToolBatchInput => ({ runId: c.runId, calls: c.calls, maxParallel: c.maxParallelTools }),
        onDone: { target: 'committingResults', actions: assign({ results: ({ event }) => event.output }) },
        onError: { target: 'ending', actions: 'failWith' },
      },
    },
    committingResults: {
      invoke: {
        src: 'commitResults',
        input: ({ context: c }) => ({ at: at(c), results: c.results, ...(c.stepUsage ? { usage: c.stepUsage } : {}) }),
        onDone: [
          {
            guard: ({ event }) => event.output.concluded !== undefined,
            target: 'finalizing',
            actions: assign(({ context, event }) => ({
              calls: [],
              results: [],
              pendingFinal: { content: event.output.concluded!, closeStep: false },
              recoveries: context.recoveries + event.output.rejections,
            })),
          },
          {
            target: 'checkingBudget',
            actions: assign(({ context, event }) => ({ calls: [], results: [], recoveries: context.recoveries + event.output.rejections })),
          },
        ],
        onError: { target: 'ending', actions: 'failWith' },
      },
    },
    checkingBudget: {
      always: [
        { guard: 'stopRequested', target: 'ending', actions: assign({ end: ended('stopped', 'incomplete') }) },
        {
          guard: 'budgetSpent',
          target: 'ending',
          actions: assign(({ context }) => ({ end: ended('budget_exhausted', 'incomplete', { budget: spentBudget(context.budget, budgetUse(context), Date.now())!.budget }) })),
        },
        { target: 'stepping' },
      ],
    },
    finalizing: {
      invoke: {
        src: 'finalize',
        input: ({ context: c }) => ({
          runId: c.runId,
          at: at(c),
          content: c.pendingFinal!.content,
          closeStep: c.pendingFinal!.closeStep,
          ...(c.stepUsage && c.pendingFinal!.closeStep ? { usage: c.stepUsage } : {}),
        }),
        onDone: [
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
        onError: { target: 'ending', actions: 'failWith' },
      },
    },
    ending: {
      invoke: {
        src: 'endRun',
        input: ({ context: c }) => ({ turn: c.turn, step: c.step, attempt: c.runEpoch, result: resultOf(c) }),
        onDone: { target: 'done', actions: assign({ result: ({ event }) => event.output }) },
        onError: { target: 'done', actions: assign(({ context }) => ({ result: { ...resultOf(context), checkpointCommitted: false } })) },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.result!,
});

export type RunActorRef = ActorRefFrom<typeof runMachine>;

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

function budgetUse(c: RunContext) {
  return { steps: c.step, toolCalls: c.toolCalls, usage: c.usage, cost: c.cost, recoveries: c.recoveries, startedAt: c.startedAt };
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
    checkpointCommitted: true,
    historyConsistent: true,
    deliveryErrors: [],
    usage: c.usage,
    steps: c.step,
  };
}
