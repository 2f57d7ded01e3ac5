/**
 * actorloop's own failures, as classes. Failures of the outside world (model, tool) are data:
 * events and results with a status. Each class has `name`, a readonly `code` discriminant and an
 * `isX(e)` guard that works across module copies (it checks `code`, not `instanceof`).
 */

import { ActorloopError, hasCode } from './error-base.js';
import type { ProviderRateLimits } from './provider-limits.js';

export { ActorloopError } from './error-base.js';
export * from './store-errors.js';
import type { LogDivergedError } from './store-errors.js';

/**
 * An append or attach carried a writer epoch older than the session's current one: another
 * writer has taken the session over (fencing).
 * @example
 * try { await store.append(id, oldEpoch, 5, drafts) } catch (e) { if (isStaleWriterError(e)) stop() }
 */
export class StaleWriterError extends ActorloopError {
  readonly code = 'stale_writer' as const;
  override readonly name = 'StaleWriterError';
  constructor(
    readonly sessionId: string,
    readonly writerEpoch: number,
    readonly currentEpoch: number,
  ) {
    super(`session ${sessionId}: writer epoch ${writerEpoch} is stale (current epoch is ${currentEpoch})`);
  }
}
export const isStaleWriterError = (e: unknown): e is StaleWriterError => hasCode(e, 'stale_writer');

/**
 * An error after which a session's writer commits nothing more and starts no effect: fenced by a
 * newer writer (StaleWriterError), or its log and it disagree (LogDivergedError). A run ends
 * `fenced` on either; a serving worker closes the session and leaves its lease to expire.
 */
export const isWriterStopped = (e: unknown): e is StaleWriterError | LogDivergedError =>
  isStaleWriterError(e) || hasCode(e, 'log_diverged');

/**
 * `expectedSeq` was not the session's tail + 1.
 * @example
 * if (isSequenceConflictError(e)) console.log(e.expectedSeq, e.actualNextSeq)
 */
export class SequenceConflictError extends ActorloopError {
  readonly code = 'sequence_conflict' as const;
  override readonly name = 'SequenceConflictError';
  constructor(
    readonly sessionId: string,
    readonly expectedSeq: number,
    readonly actualNextSeq: number,
  ) {
    super(`session ${sessionId}: expected seq ${expectedSeq} but the next seq is ${actualNextSeq}`);
  }
}
export const isSequenceConflictError = (e: unknown): e is SequenceConflictError => hasCode(e, 'sequence_conflict');

/**
 * Something that must never happen did: an event id reused with different content, a log that
 * contradicts itself. Never retried automatically.
 * @example
 * if (isInvariantViolation(e)) alertOperator(e.message)
 */
export class InvariantViolation extends ActorloopError {
  readonly code = 'invariant_violation' as const;
  override readonly name = 'InvariantViolation';
  constructor(
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
export const isInvariantViolation = (e: unknown): e is InvariantViolation => hasCode(e, 'invariant_violation');

/**
 * A record on disk could not be decoded or failed its schema: never skipped silently.
 * @example
 * if (isCorruptLogError(e)) console.error(`corrupt record ${e.sessionId}#${e.seq}: ${e.reason}`)
 */
export class CorruptLogError extends ActorloopError {
  readonly code = 'corrupt_log' as const;
  override readonly name = 'CorruptLogError';
  constructor(
    readonly sessionId: string,
    readonly seq: number,
    readonly reason: string,
  ) {
    super(`corrupt log record: session ${sessionId}, seq ${seq}: ${reason}`);
  }
}
export const isCorruptLogError = (e: unknown): e is CorruptLogError => hasCode(e, 'corrupt_log');

/**
 * A record was written by a schema version this build does not know (a newer actorloop).
 * @example
 * if (isUnknownSchemaVersionError(e)) console.error(`upgrade actorloop: log uses schema ${e.schemaVersion}`)
 */
export class UnknownSchemaVersionError extends ActorloopError {
  readonly code = 'unknown_schema_version' as const;
  override readonly name = 'UnknownSchemaVersionError';
  constructor(
    readonly sessionId: string,
    readonly seq: number,
    readonly schemaVersion: string,
    /** Set when the version is known but the record's type is not (a newer build added the type). */
    readonly eventType?: string,
  ) {
    super(
      eventType === undefined
        ? `session ${sessionId}, seq ${seq}: record has schemaVersion ${JSON.stringify(schemaVersion)}, ` +
            `which this version of actorloop does not know (it reads "1"); upgrade actorloop to read this log`
        : `session ${sessionId}, seq ${seq}: record has type ${JSON.stringify(eventType)}, which this version of ` +
            'actorloop does not know (a newer actorloop wrote it); upgrade actorloop to read this log',
    );
  }
}
export const isUnknownSchemaVersionError = (e: unknown): e is UnknownSchemaVersionError => hasCode(e, 'unknown_schema_version');

/**
 * The context does not fit the model's window even after compaction.
 * @example
 * if (isCapacityError(result.error?.cause)) shortenPrompt()
 */
export class CapacityError extends ActorloopError {
  readonly code = 'capacity' as const;
  override readonly name = 'CapacityError';
  constructor(
    readonly estimatedTokens: number,
    readonly limitTokens: number,
  ) {
    super(`context of ~${estimatedTokens} tokens does not fit the limit of ${limitTokens} tokens, even after compaction`);
  }
}
export const isCapacityError = (e: unknown): e is CapacityError => hasCode(e, 'capacity');

/**
 * The model produced invalid tool calls more often than `maxProtocolCorrections` allows.
 * @example
 * if (isProtocolExhaustedError(result.error?.cause)) console.log(result.error.cause.corrections)
 */
export class ProtocolExhaustedError extends ActorloopError {
  readonly code = 'protocol_exhausted' as const;
  override readonly name = 'ProtocolExhaustedError';
  constructor(readonly corrections: number) {
    super(`the model needed more than ${corrections} protocol corrections in one run`);
  }
}
export const isProtocolExhaustedError = (e: unknown): e is ProtocolExhaustedError => hasCode(e, 'protocol_exhausted');

/**
 * The run's final answer did not parse as JSON of its `output` schema, and the protocol
 * corrections (`maxProtocolCorrections`) that fed the issues back to the model ran out. `issues`
 * are those of the last answer (`path: message`).
 * @example
 * if (isOutputValidationError(result.error?.cause)) console.log(result.error.cause.issues)
 */
export class OutputValidationError extends ActorloopError {
  readonly code = 'output_validation' as const;
  override readonly name = 'OutputValidationError';
  constructor(
    readonly corrections: number,
    readonly issues: readonly string[],
  ) {
    super(`the final answer did not match the output schema after ${corrections} corrections: ${issues.join('; ')}`);
  }
}
export const isOutputValidationError = (e: unknown): e is OutputValidationError => hasCode(e, 'output_validation');

/**
 * A model call failed. `retryable` says whether another attempt may succeed; `partialOutput`
 * says whether output had already streamed when it broke.
 * @example
 * throw new ProviderError('rate limited', { retryable: true, code: 'rate_limit', retryAfterMs: 2000 })
 */
export class ProviderError extends ActorloopError {
  readonly code = 'provider' as const;
  override readonly name = 'ProviderError';
  readonly retryable: boolean;
  readonly partialOutput: boolean;
  /** Provider-neutral reason: 'rate_limit', 'server', 'timeout', 'connection', 'auth', 'bad_request', … */
  readonly providerCode: string;
  readonly status?: number;
  readonly retryAfterMs?: number;
  /** The provider's own rate limits, from the refusal's rate headers (docs/rate-limits.md). */
  readonly providerLimits?: ProviderRateLimits;
  constructor(
    message: string,
    options: {
      retryable: boolean;
      code: string;
      partialOutput?: boolean;
      status?: number;
      retryAfterMs?: number;
      providerLimits?: ProviderRateLimits;
      cause?: unknown;
    },
  ) {
    super(message, { cause: options.cause });
    this.retryable = options.retryable;
    this.partialOutput = options.partialOutput ?? false;
    this.providerCode = options.code;
    if (options.status !== undefined) this.status = options.status;
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
    if (options.providerLimits !== undefined) this.providerLimits = options.providerLimits;
  }
}
export const isProviderError = (e: unknown): e is ProviderError => hasCode(e, 'provider');

/**
 * An attempt is already executing on this session.
 * @example
 * if (isExecutionBusy(e)) await session.waitForIdle()
 */
export class ExecutionBusy extends ActorloopError {
  readonly code = 'execution_busy' as const;
  override readonly name = 'ExecutionBusy';
  constructor(
    readonly sessionId: string,
    readonly activeRunId: string,
    /**
     * Why no new run can start: an attempt is `executing`; the open run is `suspended` (waiting for
     * the answer to `questionId`: respond to it); or it was `interrupted` and nothing runs
     * (continue it).
     */
    readonly state: 'executing' | 'suspended' | 'interrupted' = 'executing',
    readonly questionId?: string,
  ) {
    super(busyMessage(sessionId, activeRunId, state, questionId));
  }
}

function busyMessage(sessionId: string, runId: string, state: ExecutionBusy['state'], questionId: string | undefined): string {
  if (state === 'suspended') {
    return (
      `session ${sessionId}: run ${runId} is suspended, ` +
      `waiting for the answer to ${questionId ?? 'its pending request'} (nothing is running); ` +
      `answer it with execute({ kind: 'respond', runId: '${runId}', questionId: '${questionId ?? '…'}', answer }) ` +
      `before starting a new run`
    );
  }
  if (state === 'interrupted') {
    return (
      `session ${sessionId}: run ${runId} was interrupted and is still open (nothing is running); ` +
      `resume it with execute({ kind: 'continue', runId: '${runId}' }) before starting a new run`
    );
  }
  return `session ${sessionId} is busy executing run ${runId}`;
}
export const isExecutionBusy = (e: unknown): e is ExecutionBusy => hasCode(e, 'execution_busy');

/**
 * A steering request named the wrong session instance, interaction or run epoch, or reused an
 * idempotency key for a different request.
 * @example
 * if (isSessionSteeringConflict(e)) console.log(e.field)
 */
export class SessionSteeringConflict extends ActorloopError {
  readonly code = 'session_steering_conflict' as const;
  override readonly name = 'SessionSteeringConflict';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}
export const isSessionSteeringConflict = (e: unknown): e is SessionSteeringConflict => hasCode(e, 'session_steering_conflict');

/** The process writing a session (`SessionHeldError.holder`); `workerId` when a worker of `runtime.serve` holds it. */
export interface SessionHolder {
  host: string;
  pid: number;
  workerId?: string;
}

/**
 * `openSession` found the session written by another live process (docs/guarantees.md, "One live
 * writer"); nothing was opened. Pass `{ takeover: true }` to fence that writer instead.
 * @example
 * catch (e) { if (isSessionHeldError(e)) console.log(`held by pid ${e.holder.pid} on ${e.holder.host}`) }
 */
export class SessionHeldError extends ActorloopError {
  readonly code = 'session_held' as const;
  override readonly name = 'SessionHeldError';
  constructor(
    readonly sessionId: string,
    readonly holder: SessionHolder,
  ) {
    const by = `pid ${holder.pid} on ${holder.host}${holder.workerId !== undefined ? ` (worker ${holder.workerId})` : ''}`;
    super(`session ${sessionId} is held by a live process: ${by}; open it with { takeover: true } to fence that writer`);
  }
}
export const isSessionHeldError = (e: unknown): e is SessionHeldError => hasCode(e, 'session_held');

/**
 * A budget ran out; the run ends `budget_exhausted` and this error names the budget.
 * @example
 * if (isBudgetExhaustedError(e)) console.log(e.budget, e.limit, e.used)
 */
export class BudgetExhaustedError extends ActorloopError {
  readonly code = 'budget_exhausted' as const;
  override readonly name = 'BudgetExhaustedError';
  constructor(
    readonly budget: string,
    readonly limit: string,
    readonly used: string,
  ) {
    super(`budget ${budget} exhausted: used ${used} of ${limit}`);
  }
}
export const isBudgetExhaustedError = (e: unknown): e is BudgetExhaustedError => hasCode(e, 'budget_exhausted');

/** One problem found by input validation. */
export interface ValidationIssue {
  path: (string | number)[];
  message: string;
}

/**
 * Bad input to a public function, found by its zod schema. Nothing was changed.
 * @example
 * if (isValidationError(e)) for (const i of e.issues) console.log(i.path.join('.'), i.message)
 */
export class ValidationError extends ActorloopError {
  readonly code = 'validation' as const;
  override readonly name = 'ValidationError';
  constructor(
    readonly where: string,
    readonly issues: ValidationIssue[],
  ) {
    super(`invalid input to ${where}: ${issuesText(issues)}`);
  }
}

/** `text` cut to at most `max` characters, an ellipsis ending one that was cut. */
export const cutAt = (text: string, max: number): string => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

/** The issues as a message says them: the first ten, each cut at 300 characters (input of any size gets a message of bounded size). */
function issuesText(issues: readonly ValidationIssue[]): string {
  const shown = issues.slice(0, 10).map((i) => cutAt(`${i.path.join('.') || '(root)'}: ${i.message}`, 300));
  const more = issues.length - shown.length;
  return shown.join('; ') + (more > 0 ? `; and ${more} more issue${more === 1 ? '' : 's'}` : '');
}
export const isValidationError = (e: unknown): e is ValidationError => hasCode(e, 'validation');

/**
 * An operation was cancelled through its AbortSignal (not a failure of the outside world).
 * @example
 * if (isCancelledError(e)) return 'cancelled'
 */
export class CancelledError extends ActorloopError {
  readonly code = 'cancelled' as const;
  override readonly name = 'CancelledError';
  constructor(message = 'cancelled') {
    super(message);
  }
}
export const isCancelledError = (e: unknown): e is CancelledError => hasCode(e, 'cancelled');

/**
 * `waitForResult` of a run an inbox input was to start: the session's owner rejected that input
 * when it applied it (`reason`, as `store.work.getEntry` records it — e.g. its inputId named a
 * run that already existed), so it started no run and none will come.
 * @example
 * if (isInputRejectedError(e)) console.error(`input ${e.inputId} was refused: ${e.reason}`)
 */
export class InputRejectedError extends ActorloopError {
  readonly code = 'input_rejected' as const;
  override readonly name = 'InputRejectedError';
  constructor(
    readonly sessionId: string,
    readonly inputId: string,
    readonly reason: string,
  ) {
    super(`session ${sessionId}: input ${inputId} was rejected when the session's owner applied it, and started no run: ${reason}`);
  }
}
export const isInputRejectedError = (e: unknown): e is InputRejectedError => hasCode(e, 'input_rejected');

/**
 * A session's log names an agent (in its `run/start`, `agent/handoff` or `session/attached`)
 * that this runtime does not define, or `openSession` was asked for one it does not define:
 * opening refuses it before anything is written, never running the session with another agent.
 * @example
 * if (isUnknownAgentError(e)) console.error(`define agent ${e.agentName} in createRuntime({ agents })`)
 */
export class UnknownAgentError extends ActorloopError {
  readonly code = 'unknown_agent' as const;
  override readonly name = 'UnknownAgentError';
  constructor(
    readonly sessionId: string,
    readonly agentName: string,
    readonly known: readonly string[],
  ) {
    super(`session ${sessionId}: no agent named ${JSON.stringify(agentName)} in this runtime (it has ${known.join(', ')})`);
  }
}
export const isUnknownAgentError = (e: unknown): e is UnknownAgentError => hasCode(e, 'unknown_agent');
