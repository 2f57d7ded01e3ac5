/** The base every actorloop error class extends, and the cross-copy `code` check its `isX` guards use (errors.ts). */

export type ErrorCode =
  | 'stale_writer'
  | 'sequence_conflict'
  | 'invariant_violation'
  | 'corrupt_log'
  | 'unknown_schema_version'
  | 'capacity'
  | 'protocol_exhausted'
  | 'output_validation'
  | 'provider'
  | 'execution_busy'
  | 'session_steering_conflict'
  | 'session_held'
  | 'budget_exhausted'
  | 'validation'
  | 'cancelled'
  | 'store_closed'
  | 'store_unavailable'
  | 'store'
  | 'log_diverged'
  | 'unknown_agent';

/** Base class of every error actorloop throws on purpose. */
export abstract class ActorloopError extends Error {
  abstract readonly code: ErrorCode;
}

/**
 * `e` is an actorloop error of `code`: thrown here (from any copy of the package), or as a result's
 * `error.cause` read back from the log — its recorded name, message and fields (src/actors/end-run.ts
 * `causeInfo`), which a replay, `waitForResult` or another process returns.
 */
export function hasCode(e: unknown, code: ErrorCode): boolean {
  if (typeof e !== 'object' || e === null || (e as { code?: unknown }).code !== code) return false;
  if (e instanceof Error) return true;
  const { name, message } = e as { name?: unknown; message?: unknown };
  return typeof name === 'string' && typeof message === 'string';
}
