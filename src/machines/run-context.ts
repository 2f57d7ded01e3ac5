import { noneCounted } from '../contracts/reservation.js';
import type { ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import type { LoopBudget } from '../contracts/config.js';
import type { PendingRequest } from '../contracts/events.js';
import type { FinishReason, Message, ToolCall, Usage } from '../contracts/message.js';
import type { ExecutionResult, Recovered, UncertainCall } from '../contracts/requests.js';
import type { ResumeInput, StartRunInput } from '../actors/start-run.js';
import type { OutputSpec } from '../actors/final-output.js';
import type { OfferedTools } from '../actors/session-services.js';
import type { AttemptCounted } from '../actors/call-model.js';
import type { UnsettledCall } from '../actors/end-run.js';
import type { Counted, Overrun, Reservation } from '../contracts/reservation.js';

/** How an attempt ends: what its result will say. */
export type RunEnd = Pick<
  ExecutionResult,
  'status' | 'outcome' | 'error' | 'budget' | 'budgetOwner' | 'blockedBy' | 'finalMessage' | 'finalMessageId' | 'output'
>;

export interface RunInput {
  runId: string;
  attemptId: string;
  runEpoch: number;
  turn: number;
  kind: StartRunInput['kind'];
  messages: Message[];
  executionProfileFingerprint: string;
  /** The run's output schema (docs/typed-output.md); the session gives it to the attempt's actors. */
  output?: OutputSpec;
  /** The tools the attempt is offered, as they were when it started (absent: none). */
  offered?: OfferedTools;
  budget: LoopBudget;
  maxProtocolCorrections: number;
  maxParallelTools: number;
  /** When the attempt started (the runtime's clock): maxDurationMs counts from here. */
  startedAt: number;
  /** Set for a `respond` attempt (the suspended batch and the answer) or a recovering `continue`. */
  resume?: ResumeInput;
  /** The follow-up input this run consumes (runId = inputId). */
  inputId?: string;
  /** The step's calls a cancelled suspended run's request held back without an intent: answered `skipped` at its end. */
  unrunCalls?: { callId: string; name: string }[];
  /** The last step number already written by earlier attempts (a `continue` goes on after it). */
  startStep?: number;
  /** Seq of the run's first run/start, for a later attempt (compaction keeps the whole run). */
  runFirstSeq?: number;
  /** What the run's earlier attempts spent (a respond or continue): its budgets count per run. */
  spent?: { toolCalls: number; usage: Usage; cost: string; recoveries: number; corrections: number; counted?: Counted };
  /** A continue's reservation for the crashed attempt's possibly-sent model call (recorded in its run/start). */
  recoveredReservation?: Reservation;
  /**
   * A `concludesTurn` result committed by an earlier attempt that stopped before its final/message:
   * a `continue` finalizes with its content (DESIGN §4 item 5), calling no model.
   */
  concluded?: string;
  /** Calls of the run left uncertain by a crash that earlier attempts resolved (from the log). */
  uncertainCalls?: UncertainCall[];
  /** A new run that first settled the session's interrupted run: what that found (its result reports it). */
  recovered?: Recovered;
  /** A stop accepted before this attempt (it survives recovery). */
  stopRequested?: boolean;
  /** A detach or cancel asked for before the attempt had started (or, a cancel, recorded by an earlier attempt). */
  detachRequested?: boolean;
  cancelRequested?: boolean;
  /** The reason of a cancel asked for while the attempt was prepared: recorded with its run/start (`cancellation/requested`). */
  cancelToRecord?: string;
  /** The event id that record takes (an inbox cancel's `inbox-cancel:<entryId>`: what a re-apply finds its run by). */
  cancelRecordId?: string;
}

export interface RunContext extends Omit<RunInput, 'messages' | 'uncertainCalls'> {
  messages: Message[];
  /** The run's calls left uncertain by a crash, with their resolutions (earlier attempts' and this one's). */
  uncertainCalls: UncertainCall[];
  runStartSeq: number;
  step: number;
  usage: Usage;
  /** The current step's usage (its compaction and model call): step/end carries it. */
  stepUsage: Usage | undefined;
  cost: string;
  /** Calls whose usage never came back, counted at their reservation (failed attempts, a crashed attempt's call). */
  counted: Counted;
  /** Usage the provider reported above a call's reservation (named on the result's `spending`). */
  overruns: Overrun[];
  toolCalls: number;
  recoveries: number;
  corrections: number;
  /** This step's context was prepared (steers committed, compacted if needed): its model call is made as it stands. */
  contextPrepared: boolean;
  /** The model's tool calls of this step, until the intent commit plans them. */
  asked: { toolCalls: ToolCall[]; finishReason: FinishReason } | undefined;
  calls: ToolCallIntent[];
  /** Results decided without running (denied approvals, answered questions), merged by call order. */
  presetResults: ToolCallOutput[];
  /** Call ids of the batch in the model's order. */
  order: string[];
  batchResults: ToolCallOutput[];
  /** Calls of the step left without a result (their agent's child waits or was detached): answered at the run's end if it settles. */
  unsettledCalls: UnsettledCall[];
  /** The step's tool calls a cancel kept from running once their request was committed: `skipped` at the run's end. */
  unrunCalls: { callId: string; name: string }[];
  /** The answer to finalize; `output` is it parsed against the run's output schema (once verified). */
  pendingFinal: { content: string; closeStep: boolean; finalMessageId?: string; output?: unknown } | undefined;
  /** The last answer's output-schema issues, while its correction is the run's newest one (exhausted → OutputValidationError). */
  outputIssues: string[] | undefined;
  stopRequested: boolean;
  cancelRequested: boolean;
  detachRequested: boolean;
  /** When maxDurationMs ran out (the deadline timer fired), by the runtime's clock. */
  durationSpentAt: number | undefined;
  pendingRequest: PendingRequest | undefined;
  end: RunEnd | undefined;
  result: ExecutionResult | undefined;
}

/** What the session sends a run: stop after the current tool round, cancel, detach at the next safe point. */
export type RunEvent =
  | { type: 'STOP_AFTER_ROUND' }
  | { type: 'CANCEL'; reason?: string }
  | { type: 'DETACH' }
  /** A model call's failed attempt counted at its reservation (sent by the call as it fails, before any cancel can stop it). */
  | AttemptCounted;

/** A run attempt's context as it starts: its input, with what earlier attempts spent (a respond or continue). */
export function initialContext(input: RunInput): RunContext {
  return {
    ...input,
    resume: input.resume,
    inputId: input.inputId,
    startStep: input.startStep,
    runFirstSeq: input.runFirstSeq,
    spent: input.spent,
    concluded: input.concluded,
    runStartSeq: 0,
    step: input.startStep ?? 0,
    usage: input.spent?.usage ?? { inputTokens: 0, outputTokens: 0 },
    stepUsage: undefined,
    contextPrepared: false,
    cost: input.spent?.cost ?? '0',
    counted: input.spent?.counted ?? noneCounted(),
    overruns: [],
    toolCalls: input.spent?.toolCalls ?? 0,
    recoveries: input.spent?.recoveries ?? 0,
    corrections: input.spent?.corrections ?? 0,
    asked: undefined,
    calls: [],
    presetResults: [],
    order: [],
    batchResults: [],
    unsettledCalls: [],
    unrunCalls: input.unrunCalls ?? [],
    pendingFinal: undefined,
    outputIssues: undefined,
    stopRequested: input.stopRequested ?? false,
    cancelRequested: input.cancelRequested ?? false,
    detachRequested: input.detachRequested ?? false,
    durationSpentAt: undefined,
    uncertainCalls: input.uncertainCalls ?? [],
    pendingRequest: undefined,
    end: undefined,
    result: undefined,
  };
}
