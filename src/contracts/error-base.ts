/** The base every actorloop error class extends, and the cross-copy `code` check its `isX` guards use (errors.ts). */

/** Each error code and the name of its class (errors.ts, store-errors.ts). */
const ERROR_NAMES = {
  stale_writer: 'StaleWriterError',
  sequence_conflict: 'SequenceConflictError',
  invariant_violation: 'InvariantViolation',
  corrupt_log: 'CorruptLogError',
  unknown_schema_version: 'UnknownSchemaVersionError',
  capacity: 'CapacityError',
  protocol_exhausted: 'ProtocolExhaustedError',
  output_validation: 'OutputValidationError',
  provider: 'ProviderError',
  execution_busy: 'ExecutionBusy',
  session_steering_conflict: 'SessionSteeringConflict',
  session_held: 'SessionHeldError',
  budget_exhausted: 'BudgetExhaustedError',
  validation: 'ValidationError',
  cancelled: 'CancelledError',
  store_closed: 'StoreClosedError',
  store_unavailable: 'StoreUnavailableError',
  store: 'StoreError',
  log_diverged: 'LogDivergedError',
  unknown_agent: 'UnknownAgentError',
  input_rejected: 'InputRejectedError',
} as const;
export type ErrorCode = keyof typeof ERROR_NAMES;

/** Base class of every error actorloop throws on purpose. */
export abstract class ActorloopError extends Error {
  abstract readonly code: ErrorCode;
}

/**
 * `e` is an actorloop error of `code`: thrown here (from any copy of the package), or as a result's
 * `error.cause` read back from the log — a plain object with the class's name, the message and the
 * fields `causeInfo` (src/actors/end-run.ts) records, which a replay, `waitForResult` or another
 * process returns.
 */
export function hasCode(e: unknown, code: ErrorCode): boolean {
  if (typeof e !== 'object' || e === null || (e as { code?: unknown }).code !== code) return false;
  if (e instanceof Error) return true;
  const { name, message } = e as { name?: unknown; message?: unknown };
  const proto: unknown = Object.getPrototypeOf(e);
  return (proto === Object.prototype || proto === null) && name === ERROR_NAMES[code] && typeof message === 'string';
}
