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

export function hasCode(e: unknown, code: ErrorCode): boolean {
  return typeof e === 'object' && e !== null && (e as { code?: unknown }).code === code && e instanceof Error;
}
