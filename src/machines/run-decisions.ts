import type { StepPosition, ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import { addDecimal, spentBudget, type BudgetUse } from '../contracts/budget.js';
import { isCancelledError, isWriterStopped, OutputValidationError, ProtocolExhaustedError } from '../contracts/errors.js';
import { addUsage, type Usage } from '../contracts/message.js';
import { resolutionOf, STILL_OPEN, type ExecutionResult, type Outcome, type RunStatus, type UncertainCall } from '../contracts/requests.js';
import type { DeliverFinalInput, FinalAnswerInput } from '../actors/final-answer.js';
import type { EndRunInput } from '../actors/end-run.js';
import type { CancelChildrenInput } from '../actors/run-children.js';
import type { RunContext, RunEnd } from './run-context.js';
import type { CallModelOutput } from '../actors/call-model.js';
import type { BatchBudget } from '../actors/tool-call.js';
import { addCounted, budgetLeft, type BudgetLeft, type Counted } from '../contracts/reservation.js';
import { spendingOf } from '../contracts/spending.js';

export type { RunEnd } from './run-context.js';

/** The output of the actor whose done event `event` is. */
export const outputOf = <T>(event: unknown): T => (event as { output: T }).output;
/** The error of the actor whose error event `event` is. */
export const errorOf = (event: unknown): unknown => (event as { error: unknown }).error;

export const ended = (status: RunStatus, outcome: Outcome, extra: Partial<RunEnd> = {}): RunEnd => ({ status, outcome, ...extra });

/** The end an effect's error leads to: a cancel, a fence (another writer took over), or a failure. */
export function endFor(error: unknown): RunEnd {
  if (isCancelledError(error))
    return { status: 'cancelled', outcome: 'cancelled', error: { kind: 'cancelled', message: (error as Error).message } };
  if (isWriterStopped(error))
    return { status: 'fenced', outcome: 'incomplete', error: { kind: 'inconsistent', message: (error as Error).message, cause: error } };
  return {
    status: 'failed',
    outcome: 'failed',
    error: { kind: 'execution', message: (error as Error)?.message ?? String(error), cause: error },
  };
}

export const positionOf = (c: Pick<RunContext, 'turn' | 'step' | 'runEpoch'>): StepPosition => ({
  turn: c.turn,
  step: c.step,
  attempt: c.runEpoch,
});

/** A phase's usage and cost counted in the run's and in the current step's. */
export function withStepUsage(
  c: Pick<RunContext, 'usage' | 'stepUsage' | 'cost'>,
  out: { usage?: Usage; cost?: string },
): Pick<RunContext, 'usage' | 'stepUsage' | 'cost'> {
  if (!out.usage && !out.cost) return { usage: c.usage, stepUsage: c.stepUsage, cost: c.cost };
  return {
    usage: addUsage(c.usage, out.usage),
    stepUsage: out.usage ? (c.stepUsage ? addUsage(c.stepUsage, out.usage) : out.usage) : c.stepUsage,
    cost: out.cost ? addDecimal(c.cost, out.cost) : c.cost,
  };
}

export function budgetUse(c: RunContext): BudgetUse {
  return {
    steps: c.step,
    toolCalls: c.toolCalls,
    usage: c.usage,
    cost: c.cost,
    counted: c.counted,
    recoveries: c.recoveries,
    startedAt: c.startedAt,
  };
}

/**
 * A model call's settlement counted in the run: its usage and cost, or its reservation when no usage
 * came back; its overrun (its failed attempts counted as they failed).
 */
export function withModelCall(
  c: RunContext,
  out: CallModelOutput,
): Pick<RunContext, 'usage' | 'stepUsage' | 'cost' | 'counted' | 'overruns'> {
  return {
    ...withStepUsage(c, out),
    counted: out.counted ? addCounted(c.counted, out.counted) : c.counted,
    overruns: out.overrun ? [...c.overruns, out.overrun] : c.overruns,
  };
}

/** What the usage budgets leave for the next model call (absent: the run has none). */
export function budgetLeftOf(c: RunContext): BudgetLeft | undefined {
  const { maxCost, maxOutputTokens } = c.budget;
  if (maxCost === undefined && maxOutputTokens === undefined) return undefined;
  return budgetLeft(c.budget, { outputTokens: c.usage.outputTokens + c.counted.outputTokens, cost: addDecimal(c.cost, c.counted.cost) });
}

/** The tool batch's place and what the usage budgets leave for its sub-agents (budget-pool.ts). */
export function batchBudget(c: RunContext): BatchBudget {
  const left = budgetLeftOf(c);
  return { batch: `${c.runId}/${c.runEpoch}/${c.step}`, ...(left ? { left } : {}) };
}

/** The first spent budget (DESIGN §4 item 8); time is what the deadline timer reported, never read here. */
export const spentNow = (c: RunContext) => spentBudget(c.budget, budgetUse(c), c.durationSpentAt ?? c.startedAt);

/** Batch results and preset results, in the order the model asked for the calls. */
export function inCallOrder(
  order: readonly string[],
  preset: readonly ToolCallOutput[],
  results: readonly ToolCallOutput[],
): ToolCallOutput[] {
  // the usual case: no preset results, and the batch answered in call order already
  if (preset.length === 0 && results.length === order.length && results.every((r, i) => r.callId === order[i]))
    return results as ToolCallOutput[];
  const all = [...preset, ...results];
  const pos = new Map(order.map((id, i) => [id, i]));
  return all.sort((a, b) => (pos.get(a.callId) ?? 0) - (pos.get(b.callId) ?? 0));
}

/**
 * How a recovering continue resolved the calls its run left without results (DESIGN §5): a preset
 * outcome (reconciled, uncertain, skipped) or run again.
 */
export function recoveredCalls(
  batch: readonly ToolCallIntent[],
  resumed: { calls: readonly ToolCallIntent[]; preset: readonly ToolCallOutput[] },
): UncertainCall[] {
  const rerun = new Set(resumed.calls.map((c) => c.callId));
  const preset = new Map(resumed.preset.map((o) => [o.callId, o.outcome]));
  return batch.flatMap((c) => {
    if (c.resumable && rerun.has(c.callId)) return []; // an agentTool's call resumes its child: not uncertain
    const outcome = preset.get(c.callId);
    if (outcome) return [{ name: c.name, callId: c.callId, mode: c.mode, resolution: resolutionOf(c.mode, outcome) }];
    return rerun.has(c.callId) ? [{ name: c.name, callId: c.callId, mode: c.mode, resolution: 're-run' as const }] : [];
  });
}

type CallsSpending = Pick<RunContext, 'usage' | 'cost' | 'counted' | 'overruns'>;

/**
 * The calls' outcomes' model spending (agentTool child runs: usage, cost, calls counted at
 * reservation, overruns) counted in the run's figures, or nothing when they carry none.
 */
export function withCallsSpending(c: CallsSpending, results: readonly Pick<ToolCallOutput, 'outcome'>[]): Partial<CallsSpending> {
  let out: Partial<CallsSpending> = {};
  for (const { outcome: o } of results) {
    if (o.kind !== 'completed' && o.kind !== 'cancelled') continue;
    if (o.usage) out = { ...out, usage: addUsage(out.usage ?? c.usage, o.usage) };
    if (o.cost) out = { ...out, cost: addDecimal(out.cost ?? c.cost, o.cost) };
    if (o.counted) out = { ...out, counted: addCounted(out.counted ?? c.counted, o.counted) };
    if (o.overruns?.length) out = { ...out, overruns: [...(out.overruns ?? c.overruns), ...o.overruns] };
  }
  return out;
}

/** What the children of the calls a run leaves open on (waiting on a child's request, detached) had spent, if any. */
function heldByChildren(c: RunContext, status: RunStatus): Counted | undefined {
  if (!STILL_OPEN.has(status)) return undefined;
  const held = c.unsettledCalls.flatMap((u) => (u.held ? [u.held] : []));
  return held.length > 0 ? held.reduce((a, b) => addCounted(a, b)) : undefined;
}

/** The attempt's result as the run machine knows it (endRun commits it). */
export function resultOf(c: RunContext): ExecutionResult {
  const end = c.end ?? { status: 'failed' as const, outcome: 'failed' as const };
  return {
    runId: c.runId,
    attemptId: c.attemptId,
    outcome: end.outcome,
    status: end.status,
    ...(end.finalMessage !== undefined ? { finalMessage: end.finalMessage } : {}),
    ...(end.finalMessageId ? { finalMessageId: end.finalMessageId } : {}),
    ...(end.output !== undefined ? { output: end.output } : {}),
    ...(end.error ? { error: end.error } : {}),
    ...(end.budget ? { budget: end.budget } : {}),
    ...(end.budgetOwner !== undefined ? { budgetOwner: end.budgetOwner } : {}),
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
    uncertainCalls: c.uncertainCalls,
    ...(c.recovered ? { recovered: c.recovered } : {}),
    // a run left waiting on its agent calls' children holds what they spent so far (the calls answer with it later)
    ...spendingOf(c.budget, { outputTokens: c.usage.outputTokens, cost: c.cost }, c.counted, c.overruns, heldByChildren(c, end.status)),
    ...(c.counted.outputTokens > 0 || c.counted.cost !== '0' ? { counted: c.counted } : {}),
  };
}

/** The input of the run's closing commit (endRun): its result, and what of its last step it still answers. */
export function endRunInput(c: RunContext): EndRunInput {
  const result = resultOf(c);
  const cancelled = c.end?.status === 'cancelled';
  // a verified answer a cancel kept from being committed, or calls it kept from running: their step still ends
  const keptFinal = c.pendingFinal?.closeStep === true && c.pendingFinal.finalMessageId === undefined;
  return {
    at: positionOf(c),
    result,
    started: c.runStartSeq > 0,
    // a run that settles (cancelled, or failed as its results commit failed) answers the calls it left unsettled
    ...(c.unsettledCalls.length > 0 && !STILL_OPEN.has(result.status) ? { unanswered: c.unsettledCalls } : {}),
    ...(cancelled && (keptFinal || c.unrunCalls.length > 0) ? { openStep: c.stepUsage ? { usage: c.stepUsage } : {} } : {}),
    ...(c.unrunCalls.length > 0 ? { unrun: c.unrunCalls } : {}),
  };
}

/**
 * The input of a cancelled run's cancel of its children, before its end commits: a crash in between
 * leaves the run open, and its cancel, redone, cancels them again (a child already cancelled is left).
 */
export const cancelChildrenInput = (c: RunContext): CancelChildrenInput => ({
  runId: c.runId,
  fromSeq: c.runStartSeq,
  answering: c.unsettledCalls.map((u) => u.callId),
});

/** The input of the final answer's phases (verifyFinal, commitFinal). */
export function finalInput(c: RunContext): FinalAnswerInput {
  const f = c.pendingFinal!;
  return {
    runId: c.runId,
    at: positionOf(c),
    content: f.content,
    closeStep: f.closeStep,
    ...(f.output !== undefined ? { output: f.output } : {}),
    ...(c.stepUsage && f.closeStep ? { usage: c.stepUsage } : {}),
    ...(c.output ? { outputSpec: c.output } : {}),
  };
}

/** The input of the committed final's delivery. */
export function deliverInput(c: RunContext): DeliverFinalInput {
  const f = c.pendingFinal!;
  return {
    runId: c.runId,
    at: positionOf(c),
    content: f.content,
    finalMessageId: f.finalMessageId!,
    ...(f.output !== undefined ? { output: f.output } : {}),
  };
}

/** A committed final's answer, as the run's end carries it. */
export function finalOf(c: RunContext): Pick<RunEnd, 'finalMessage' | 'finalMessageId' | 'output'> {
  const f = c.pendingFinal!;
  return { finalMessage: f.content, finalMessageId: f.finalMessageId!, ...(f.output !== undefined ? { output: f.output } : {}) };
}

/** The end once the protocol corrections ran out: the last answer's output issues, when it was an answer that failed its schema. */
export function exhaustedEnd(c: RunContext): RunEnd {
  const e = c.outputIssues
    ? new OutputValidationError(c.maxProtocolCorrections, c.outputIssues)
    : new ProtocolExhaustedError(c.maxProtocolCorrections);
  return ended('failed', 'failed', { error: { kind: 'execution', message: e.message, cause: e } });
}

/** An answer that failed its output schema: a protocol correction, its issues kept for the exhausted end. */
export const outputCorrected = (
  c: RunContext,
  rejected: { issues: string[] },
): Pick<RunContext, 'corrections' | 'pendingFinal' | 'outputIssues'> => ({
  corrections: c.corrections + 1,
  pendingFinal: undefined,
  outputIssues: rejected.issues,
});
