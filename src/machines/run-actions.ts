import { assign, sendTo, type ActorRefFrom } from 'xstate';
import type { ToolCallOutput } from '../contracts/calls.js';
import { CapacityError } from '../contracts/errors.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { CommitIntentOutput } from '../actors/commit-intent.js';
import type { CommitResultsOutput } from '../actors/commit-results.js';
import { unsettledAnswer, type UnsettledCall } from '../actors/end-run.js';
import type { DeliverFinalOutput, VerifyFinalOutput } from '../actors/final-answer.js';
import type { PrepareContextOutput } from '../actors/prepare-context.js';
import type { StartRunOutput } from '../actors/start-run.js';
import type { ChildOfCall } from '../actors/run-children.js';
import type { RunContext, RunEvent } from './run-context.js';
import type { AttemptCounted } from '../actors/call-model.js';
import type { toolBatchMachine } from './tool-batch.machine.js';
import {
  withCallsSpending,
  endFor,
  errorOf,
  exhaustedEnd,
  finalOf,
  outputCorrected,
  outputOf,
  ended,
  recoveredCalls,
  resultOf,
  spentNow,
  withModelCall,
  withStepUsage,
} from './run-decisions.js';
import type { CallModelOutput } from '../actors/call-model.js';
import { addCounted } from '../contracts/reservation.js';

/**
 * `assign` typed as the run machine's `setup` types it, but spawning no actors (`never`), so the
 * actions fit the actors the machine registers. An event is the run's own or an actor's done or
 * error event, read with `outputOf` and `errorOf`.
 */
const assignRun = assign<RunContext, RunEvent, undefined, RunEvent, never>;

/**
 * The run machine's named actions (`setup({ actions })` in run.machine.ts): how each phase's
 * outcome changes the run's context, over the pure decisions of run-decisions.ts.
 */
export const runActions = {
  failWith: assignRun(({ event }) => ({ end: endFor(errorOf(event)) })),
  failRefused: assignRun(({ event }) => ({ end: endFor(outputOf<Extract<CallModelOutput, { kind: 'refused' }>>(event).error) })),
  /** The run was asked to cancel: it settles `cancelled` (a call its step left unsettled is answered so at its end). */
  endCancelled: assignRun({
    end: () => ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled (requestCancel or kill switch)' } }),
  }),
  endStopped: assignRun({ end: () => ended('stopped', 'incomplete') }),
  endDetached: assignRun({ end: () => ended('detached', 'incomplete') }),
  /** The run's maxDurationMs ran out while its model call waited for a rate limit (the call's error says when). */
  spendDuration: assignRun(({ event }) => ({ durationSpentAt: ((event as { error?: { at?: number } }).error?.at ?? 0) as number })),
  endBudgetSpent: assignRun({ end: ({ context }) => ended('budget_exhausted', 'incomplete', { budget: spentNow(context)!.budget }) }),
  requestStop: assignRun({ stopRequested: true }),
  requestCancel: assignRun({ cancelRequested: true }),
  requestDetach: assignRun({ detachRequested: true }),
  cancelBatch: sendTo<RunContext, RunEvent, undefined, ActorRefFrom<typeof toolBatchMachine>, RunEvent>('toolBatch', ({ event }) => ({
    type: 'CANCEL' as const,
    reason: (event as { reason?: string }).reason ?? 'cancelled',
  })),
  /** A stop or detach of the run reaches its running calls (an agent call's child follows it). */
  stopBatch: sendTo<RunContext, RunEvent, undefined, ActorRefFrom<typeof toolBatchMachine>, RunEvent>('toolBatch', {
    type: 'CONTROL' as const,
    request: 'stop' as const,
  }),
  detachBatch: sendTo<RunContext, RunEvent, undefined, ActorRefFrom<typeof toolBatchMachine>, RunEvent>('toolBatch', {
    type: 'CONTROL' as const,
    request: 'detach' as const,
  }),
  recordStart: assignRun(({ event }) => ({ messages: [], runStartSeq: outputOf<StartRunOutput>(event).runStartSeq })),
  resumeBatch: assignRun(({ context, event }) => {
    const out = outputOf<StartRunOutput>(event);
    const r = out.resumed!;
    return {
      messages: [],
      runStartSeq: out.runStartSeq,
      step: context.resume!.step,
      calls: r.calls,
      presetResults: r.preset,
      order: context.resume!.batch.map((b) => b.callId),
      // approved calls are new; a recovered call's tool/call was counted with the run's spending,
      // and so was an agent call a child's request held back
      toolCalls: context.toolCalls + (context.resume!.kind === 'answer' && !context.resume!.pendingRequest.path ? r.calls.length : 0),
      ...(context.resume!.kind === 'recover'
        ? { uncertainCalls: [...context.uncertainCalls, ...recoveredCalls(context.resume!.batch, r)] }
        : {}),
    };
  }),
  finalizeConcluded: assignRun({ pendingFinal: ({ context }) => ({ content: context.concluded!, closeStep: false }) }),
  nextStep: assignRun({ step: ({ context }) => context.step + 1, stepUsage: undefined, contextPrepared: false }),
  countCompaction: assignRun(({ context, event }) => withStepUsage(context, outputOf<PrepareContextOutput>(event))),
  endSummaryRefused: assignRun({
    end: ({ event }) => {
      const { budget, budgetOwner } = outputOf<PrepareContextOutput>(event).unaffordable!;
      return ended('budget_exhausted', 'incomplete', { budget, ...(budgetOwner !== undefined ? { budgetOwner } : {}) });
    },
  }),
  markPrepared: assignRun({ contextPrepared: true }),
  failPricing: assignRun({ end: ({ event }) => endFor(outputOf<PrepareContextOutput>(event).pricingError) }),
  failCapacity: assignRun({
    end: ({ event }) => {
      const { size, limit } = outputOf<PrepareContextOutput>(event).overflow!;
      return endFor(new CapacityError(size, limit));
    },
  }),
  countModelCall: assignRun(({ context, event }) => withModelCall(context, outputOf<CallModelOutput>(event))),
  countAttempt: assignRun(({ context, event }) => ({ counted: addCounted(context.counted, (event as AttemptCounted).counted) })),
  endBudgetRefused: assignRun({
    end: ({ event }) => {
      const { budget, budgetOwner } = outputOf<Extract<CallModelOutput, { kind: 'unaffordable' }>>(event);
      return ended('budget_exhausted', 'incomplete', { budget, ...(budgetOwner !== undefined ? { budgetOwner } : {}) });
    },
  }),
  keepToolCalls: assignRun({
    asked: ({ event }) => {
      const out = outputOf<Extract<CallModelOutput, { kind: 'toolCalls' }>>(event);
      return { toolCalls: out.toolCalls, finishReason: out.finishReason };
    },
  }),
  keepAnswer: assignRun({
    pendingFinal: ({ event }) => ({ content: outputOf<Extract<CallModelOutput, { kind: 'answer' }>>(event).content, closeStep: true }),
  }),
  endModelCallCancelled: assignRun({
    end: () => ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'model call cancelled' } }),
  }),
  countCorrection: assignRun({ corrections: ({ context }) => context.corrections + 1, asked: undefined, outputIssues: undefined }),
  countOutputCorrection: assignRun(({ context, event }) =>
    outputCorrected(context, outputOf<Extract<VerifyFinalOutput, { kind: 'output_rejected' }>>(event)),
  ),
  keepOutput: assignRun({
    pendingFinal: ({ context, event }) => ({
      ...context.pendingFinal!,
      output: outputOf<Extract<VerifyFinalOutput, { kind: 'accepted' }>>(event).output,
    }),
  }),
  endProtocolExhausted: assignRun({ end: ({ context }) => exhaustedEnd(context) }),
  endBlocked: assignRun({
    end: ({ event }) =>
      ended('blocked', 'incomplete', { blockedBy: outputOf<Extract<CommitIntentOutput, { kind: 'blocked' }>>(event).locks }),
  }),
  /** The run was cancelled as its request was committed: it ends cancelled, the step's calls never run. */
  endSuspendCancelled: assignRun(({ context }) => ({
    unrunCalls: context.asked!.toolCalls.map((c) => ({ callId: c.id, name: c.name })),
    end: ended('cancelled', 'cancelled', { error: { kind: 'cancelled', message: 'cancelled as the run suspended for an answer' } }),
  })),
  endSuspended: assignRun(({ event }) => ({
    pendingRequest: outputOf<Extract<CommitIntentOutput, { kind: 'suspended' }>>(event).pendingRequest,
    end: ended('suspended', 'suspended'),
  })),
  /**
   * Calls of the step were left without a result (agent calls whose child waits for an answer, or
   * detached): the run waits for the first child's request (suspended), else it is detached — and
   * its end answers them `cancelled` if it settles instead (a cancel meanwhile, a failed commit).
   */
  endUnsettled: assignRun(({ context, event }) => {
    const pendingRequest = outputOf<CommitResultsOutput>(event).unsettled!.pendingRequest;
    const unsettledCalls = context.batchResults.flatMap(unsettledCallOf);
    return pendingRequest
      ? { pendingRequest, unsettledCalls, end: ended('suspended', 'suspended') }
      : { unsettledCalls, end: ended('detached', 'incomplete') };
  }),
  keepIntents: assignRun(({ context, event }) => {
    const calls = outputOf<Extract<CommitIntentOutput, { kind: 'intents' }>>(event).calls;
    return { asked: undefined, calls, order: calls.map((c) => c.callId), presetResults: [], toolCalls: context.toolCalls + calls.length };
  }),
  keepBatchResults: assignRun(({ context, event }) => {
    // (a call left unsettled in a cancelled run is answered `cancelled` at the run's end, once its child is cancelled)
    const results = outputOf<ToolCallOutput[]>(event);
    // a call's own model spending (an agentTool's child run) rolls up into the run's
    return { batchResults: results, ...withCallsSpending(context, results) };
  }),
  /** What the cancel did to the children of the calls the run's end answers; their runs' spending rolls up into the run's. */
  keepChildren: assignRun(({ context, event }) => {
    const children = new Map(outputOf<ChildOfCall[]>(event).map((c) => [c.callId, c]));
    const unsettledCalls = context.unsettledCalls.map((u) => {
      const child = children.get(u.callId);
      return child ? { ...u, child } : u;
    });
    const answers = unsettledCalls.map((u) => ({ outcome: unsettledAnswer('cancelled', u.asked, u.child) }));
    return { unsettledCalls, ...withCallsSpending(context, answers) };
  }),
  countRejections: assignRun(({ context, event }) => ({
    calls: [],
    presetResults: [],
    batchResults: [],
    recoveries: context.recoveries + outputOf<CommitResultsOutput>(event).rejections,
  })),
  // a transfer call handed the session to another agent: the rest of the attempt is offered its tools (and answers with its schema)
  takeHandoff: assignRun(({ event }) => {
    const h = outputOf<CommitResultsOutput>(event).handoff;
    return h ? { offered: h.offered, ...(h.output ? { output: h.output } : {}) } : {};
  }),
  finalizeConcludedByTool: assignRun({
    pendingFinal: ({ event }) => ({ content: outputOf<CommitResultsOutput>(event).concluded!, closeStep: false }),
  }),
  countFinalRejection: assignRun({ recoveries: ({ context }) => context.recoveries + 1, pendingFinal: undefined }),
  keepFinalMessageId: assignRun({
    pendingFinal: ({ context, event }) => ({
      ...context.pendingFinal!,
      finalMessageId: outputOf<{ finalMessageId: string }>(event).finalMessageId,
    }),
  }),
  endDelivered: assignRun({ end: ({ context }) => ended('succeeded', 'completed', finalOf(context)) }),
  endDeliveryUnknown: assignRun({
    end: ({ context, event }) =>
      ended('delivery_unknown', 'failed', {
        ...finalOf(context),
        error: { kind: 'finalization', message: outputOf<Extract<DeliverFinalOutput, { kind: 'delivery_unknown' }>>(event).reason },
      }),
  }),
  keepResult: assignRun({ result: ({ event }) => outputOf<ExecutionResult>(event) }),
  keepUncommittedResult: assignRun({ result: ({ context }) => ({ ...resultOf(context), checkpointCommitted: false }) }),
};

/** The child session an unsettled call's request came from (the run of it that waits), if it asked. */
const askedBy = (r: ToolCallOutput): string | undefined => r.unsettled?.pendingRequest?.path?.[0];

/** A call of the batch left unsettled, as the run's end answers it if the run settles. */
function unsettledCallOf(r: ToolCallOutput): UnsettledCall[] {
  if (!r.unsettled) return [];
  const asked = askedBy(r);
  return [{ callId: r.callId, name: r.name, ...(asked ? { asked } : {}), ...(r.unsettled.held ? { held: r.unsettled.held } : {}) }];
}
