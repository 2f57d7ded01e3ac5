import { ExecutionBusy, InvariantViolation, ValidationError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import type { PendingRequest } from '../contracts/events.js';
import { toMessages, type IdentifiedRequest } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { ResumeInput, RunInput } from '../machines/run.machine.js';
import { awaitedRequest, type OpenRunState } from '../persistence/open-run.js';
import { addCounted, noneCounted, type Reservation } from '../contracts/reservation.js';
import { answerSchema, ApprovalAnswer, JsonValue } from './answer-schema.js';
import type { LoopBudget } from '../contracts/config.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { ToolSet } from './tool-set.js';
import { outputSpec, RecordedOutput, recordedSpec, withOutput, type OutputSpec } from '../actors/final-output.js';

/** A prompt's messages once prepareAttempt stored their bytes as blobs (bytes still inline: an InvariantViolation, never logged). */
function storedOnly(messages: ReturnType<typeof toMessages>): Message[] {
  for (const m of messages)
    if (typeof m.content !== 'string' && m.content.some((p) => 'data' in p))
      throw new InvariantViolation('a prompt reached its run with content bytes not stored as blobs');
  return messages as Message[];
}

/** What an attempt's run input is made from: the session's open run, last turn and options. */
export interface AttemptSource {
  sessionId: string;
  /** The attempt starts cancelled: it may be a continue of a suspended run (which it ends cancelled). */
  cancelled?: boolean;
  /** The tools the attempt is offered, as they are now. */
  toolSet: ToolSet;
  options: ResolvedRuntimeOptions;
  /** The attempt's budget: its run's (a respond or continue keeps the budget its run started with). */
  budget: LoopBudget;
  /** The runtime's output schema (`options.output`), built once per runtime. */
  runtimeOutput: OutputSpec | undefined;
  /** The runtime clock's time now. */
  now: number;
  openRun: OpenRunState | undefined;
  lastTurn: number;
  spentOf(open: OpenRunState): NonNullable<RunInput['spent']>;
  /** The reservation a continue counts for a crashed attempt's possibly-sent model call (none without a usage budget). */
  recoveredReservation?(spent: NonNullable<RunInput['spent']>): Reservation | undefined;
}

/** A new run while `open` is still open: suspended (respond to it) or interrupted (continue it). */
export function openRunBusy(sessionId: string, open: OpenRunState): ExecutionBusy {
  const asked = awaitedRequest(open);
  return asked
    ? new ExecutionBusy(sessionId, open.runId, 'suspended', asked.questionId)
    : new ExecutionBusy(sessionId, open.runId, 'interrupted');
}

/**
 * The run input of one execute request (DESIGN §6): a prompt opens turn lastTurn + 1 (refused
 * while a run is open); a respond answers the open run's pending request (its answer checked
 * against the request); a continue resumes the open run after its last step, resolving the calls
 * whose intents have no result. Throws ValidationError or ExecutionBusy.
 */
export function attemptInput(req: IdentifiedRequest, s: AttemptSource): RunInput {
  const output = runOutput(req, s.runtimeOutput, s.openRun);
  const base = {
    runId: req.runId,
    attemptId: req.attemptId,
    ...offeredOf(s.toolSet, output),
    budget: s.budget,
    maxProtocolCorrections: s.options.config.maxProtocolCorrections,
    maxParallelTools: s.options.config.maxParallelTools,
    startedAt: s.now,
  };
  const open = s.openRun;
  if (req.kind === 'prompt') {
    if (open) throw openRunBusy(s.sessionId, open);
    return { ...base, runEpoch: 1, turn: s.lastTurn + 1, kind: 'prompt', messages: storedOnly(toMessages(req.message)) };
  }
  if (!open || open.runId !== req.runId) {
    throw new ValidationError('session.execute', [
      { path: ['runId'], message: `run ${req.runId} is not open in this session (nothing to ${req.kind})` },
    ]);
  }
  if (req.kind === 'respond') {
    const pending = open.pending;
    if (!pending || pending.pendingRequest.questionId !== req.questionId) {
      throw new ValidationError('session.execute', [
        { path: ['questionId'], message: `run ${req.runId} has no pending request ${req.questionId}` },
      ]);
    }
    const pr = pending.pendingRequest;
    if (pr.kind === 'approval') assertDecisions(pr, parseInput(ApprovalAnswer, req.answer, 'session.execute: answer').decisions);
    else if (pr.schema) parseInput(answerSchema(pr.schema), req.answer, 'session.execute: answer');
    // whatever its schema allows, an answer is logged: it must be JSON (no BigInt, function, undefined)
    if (pr.kind !== 'approval') parseInput(JsonValue, req.answer, 'session.execute: answer');
    const resume: ResumeInput = {
      kind: 'answer',
      step: pending.step,
      batch: pending.batch,
      pendingRequest: pr,
      answer: req.answer,
      // (a child's request is timed by the child that asked it, when the answer reaches it)
      timedOut: pr.kind === 'approval' && !pr.path && pr.expiresAt !== undefined && s.now > pr.expiresAt,
    };
    return {
      ...base,
      runEpoch: open.runEpoch + 1,
      turn: open.turn,
      kind: 'respond',
      messages: [],
      resume,
      runFirstSeq: open.startSeq,
      stopRequested: open.stopAccepted,
      ...cancelStanding(open),
      spent: s.spentOf(open),
      uncertainCalls: open.uncertainCalls,
    };
  }
  const asked = awaitedRequest(open);
  if (asked && !s.cancelled) {
    throw new ValidationError('session.execute', [
      { path: ['kind'], message: `run ${req.runId} waits for an answer to ${asked.questionId}: respond to it` },
    ]);
  }
  // the newest attempt ended with no run/end (a crash): one model call of it may have been sent
  // and its usage never came back — it counts at its worst case, recorded in this attempt's run/start
  let spent = s.spentOf(open);
  const recovered = open.lastEndStatus === undefined ? s.recoveredReservation?.(spent) : undefined;
  if (recovered) spent = { ...spent, counted: addCounted(spent.counted ?? noneCounted(), recovered) };
  // a suspended run cancelled: the calls its request held back without an intent get `skipped` results at its end
  const unrun = open.pending ? open.pending.batch.filter((c) => !open.unresolvedCalls.some((u) => u.callId === c.callId)) : [];
  return {
    ...base,
    ...(unrun.length > 0 ? { unrunCalls: unrun.map((c) => ({ callId: c.callId, name: c.name })) } : {}),
    runEpoch: open.runEpoch + 1,
    turn: open.turn,
    kind: 'continue',
    messages: [],
    runFirstSeq: open.startSeq,
    spent,
    ...(recovered ? { recoveredReservation: recovered } : {}),
    uncertainCalls: open.uncertainCalls,
    stopRequested: open.stopAccepted,
    ...cancelStanding(open),
    ...(open.unresolvedCalls.length > 0
      ? { resume: { kind: 'recover' as const, step: open.step, batch: open.unresolvedCalls, released: open.releasedAfterIntent } }
      : { startStep: open.step, ...(open.concluded !== undefined ? { concluded: open.concluded } : {}) }),
  };
}

/**
 * A cancel the log holds for the open run (its attempt stopped before the cancelled end
 * committed): the next attempt, whatever it was asked to do, starts cancelled — it resolves the
 * interrupted calls without starting any again and ends `cancelled` (docs/guarantees.md, "Recovery").
 */
const cancelStanding = (open: OpenRunState): Pick<RunInput, 'cancelRequested'> => (open.cancelRequested ? { cancelRequested: true } : {});

/** The run of a follow-up input (runId = attemptId = inputId), the turn after `lastTurn`. */
export function followUpInput(
  f: { inputId: string; messages: RunInput['messages'] },
  s: Pick<AttemptSource, 'toolSet' | 'options' | 'runtimeOutput' | 'now' | 'lastTurn'>,
): RunInput {
  return {
    ...offeredOf(s.toolSet, s.runtimeOutput),
    runId: f.inputId,
    attemptId: f.inputId,
    runEpoch: 1,
    turn: s.lastTurn + 1,
    kind: 'follow_up',
    inputId: f.inputId,
    messages: f.messages,
    budget: s.options.budget,
    maxProtocolCorrections: s.options.config.maxProtocolCorrections,
    maxParallelTools: s.options.config.maxParallelTools,
    startedAt: s.now,
  };
}

/** What an attempt is offered (`set`'s tools, `output`) and the execution-profile fingerprint they make. */
function offeredOf(set: ToolSet, output: OutputSpec | undefined): Pick<RunInput, 'offered' | 'output' | 'executionProfileFingerprint'> {
  return {
    offered: { tools: set.tools, specs: set.specs, catalogDigest: set.catalogDigest },
    executionProfileFingerprint: withOutput(set.fingerprint, output),
    ...(output ? { output } : {}),
  };
}

/**
 * The attempt's output schema: a prompt's own, else the runtime's; a respond or continue keeps
 * the schema its run recorded in run/start — the zod schema given (the request's or the
 * runtime's) when its digest is the recorded one, else the recorded JSON Schema converted back
 * (a continue in another process). A respond or continue that gives another schema is refused.
 */
export function runOutput(
  req: IdentifiedRequest,
  runtimeOutput: OutputSpec | undefined,
  open: OpenRunState | undefined,
): OutputSpec | undefined {
  const where = 'session.execute: output';
  if (req.kind === 'prompt') return req.output ? outputSpec(req.output, where) : runtimeOutput;
  const recorded = open?.runId === req.runId ? open.output : undefined;
  const given = req.output ? outputSpec(req.output, where) : undefined;
  if (!recorded) {
    if (given)
      throw new ValidationError('session.execute', [
        { path: ['output'], message: `run ${req.runId} was started without an output schema: a ${req.kind} cannot give one` },
      ]);
    return undefined;
  }
  if (given && given.record.digest !== recorded.digest) {
    throw new ValidationError('session.execute', [
      {
        path: ['output'],
        message: `run ${req.runId} was started with another output schema (digest ${recorded.digest}): a ${req.kind} keeps it`,
      },
    ]);
  }
  if (given) return given;
  return runtimeOutput?.record.digest === recorded.digest ? runtimeOutput : recordedSpec(RecordedOutput.parse(recorded), req.runId, where);
}

/** Refuses decisions naming a call the approval did not ask about (an unknown id, a call that needs no approval). */
function assertDecisions(pr: Extract<PendingRequest, { kind: 'approval' }>, decisions: Record<string, unknown>): void {
  const asked = new Set(pr.calls.map((c) => c.callId));
  const issues = Object.keys(decisions)
    .filter((callId) => !asked.has(callId))
    .map((callId) => ({
      path: ['decisions', callId],
      message: `call ${callId} is not one of approval ${pr.questionId}'s calls (${[...asked].join(', ')})`,
    }));
  if (issues.length > 0) throw new ValidationError('session.execute: answer', issues);
}
