import type { z } from 'zod';
import {
  ActorloopError,
  isCorruptLogError,
  isUnknownAgentError,
  isStoreError,
  isStoreUnavailableError,
  isUnknownSchemaVersionError,
  isValidationError,
} from '../contracts/errors.js';

/** The CLI's exit codes (docs/cli.md). */
export const EXIT = {
  ok: 0,
  /** The run did not complete, or an unexpected error. */
  failure: 1,
  /** Bad arguments. */
  usage: 2,
  /** The log cannot be read: a corrupt record or a newer schema version. */
  corrupt: 3,
  /** No data dir, or no such session in it. */
  notFound: 4,
  /** Stopped by Ctrl-C (the run is left resumable). */
  interrupted: 130,
} as const;

/**
 * An error the CLI reports as one clear line and exits with `exitCode`.
 * @example
 * throw new CliError('unknown session s9', EXIT.notFound)
 */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

/** Parses a command-line value with a zod schema; a bad value is a usage error naming `what`. */
export function parseArg<T extends z.ZodType>(schema: T, value: unknown, what: string): z.output<T> {
  const r = schema.safeParse(value);
  if (!r.success)
    throw new CliError(`${what}: ${r.error.issues.map((i) => i.message).join('; ')} (got ${JSON.stringify(value)})`, EXIT.usage);
  return r.data;
}

/** The message and exit code for anything a command threw. */
export function describeFailure(e: unknown): { message: string; exitCode: number } {
  if (e instanceof CliError) return { message: e.message, exitCode: e.exitCode };
  if (isCorruptLogError(e)) {
    // seq 0 is not a record: the session's head (or the store's own state) is unreadable
    const intact = e.seq > 0 ? ` The records before seq ${e.seq} are intact;` : '';
    return {
      message: `corrupt log: session ${e.sessionId}${e.seq > 0 ? `, seq ${e.seq}` : ''}: ${e.reason}.${intact} nothing was changed.`,
      exitCode: EXIT.corrupt,
    };
  }
  if (isUnknownSchemaVersionError(e)) {
    return {
      message:
        `session ${e.sessionId}, seq ${e.seq} was written by a newer actorloop (schema version ${e.schemaVersion}): ` +
        `upgrade actorloop to read it.`,
      exitCode: EXIT.corrupt,
    };
  }
  if (isValidationError(e)) return { message: e.message, exitCode: EXIT.usage };
  // PostgreSQL unreachable, or a schema missing or newer than this version: its message says what to do
  if (isStoreUnavailableError(e)) return { message: e.message, exitCode: EXIT.failure };
  // the store's files could not be used (a journal segment removed, an I/O error): its own words
  if (isStoreError(e)) return { message: e.message, exitCode: EXIT.failure };
  // a session whose agent the CLI does not define (it runs the demo agent only)
  if (isUnknownAgentError(e)) {
    return {
      message: `${e.message}: the CLI defines only the demo agent; open this session with a runtime that defines ${JSON.stringify(e.agentName)}`,
      exitCode: EXIT.failure,
    };
  }
  // any other error actorloop throws on purpose says what happened in its message: its stack adds nothing
  if (e instanceof ActorloopError) return { message: e.message.replace(/\s*\n\s*/g, ' '), exitCode: EXIT.failure };
  // LMDB's own checks of its pages (lmdb-js throws them as plain Errors)
  if (e instanceof Error && /MDB_CORRUPTED|MDB_PAGE_NOTFOUND|MDB_INVALID|MDB_VERSION_MISMATCH/.test(e.message)) {
    return { message: `the data file is damaged (${e.message.split('\n')[0]}); nothing was changed`, exitCode: EXIT.corrupt };
  }
  // a file system error (ENOENT, EACCES, …) says enough in its message; anything else is a bug: its stack helps
  const isSystemError = e instanceof Error && typeof (e as NodeJS.ErrnoException).syscall === 'string';
  return { message: e instanceof Error ? (isSystemError ? e.message : (e.stack ?? e.message)) : String(e), exitCode: EXIT.failure };
}
