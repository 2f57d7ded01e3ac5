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

/** The variable naming the PostgreSQL database when `--postgres` is not given. */
export const DATABASE_URL_ENV = 'ACTORLOOP_DATABASE_URL';

/**
 * A database URL with its password shown as `***`, for messages; in a text that is not a valid
 * URL, whatever stands between `user:` and `@`.
 * @example
 * redactUrl('postgres://u:s3cret@h/db') // 'postgres://u:***@h/db'
 */
export function redactUrl(url: string): string {
  if (!URL.canParse(url)) return url.replace(/^([^:/@]*:\/\/[^:/@]*:)[^@/]*@/, '$1***@');
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}

/** Where each option of `demo` and `web` is given: its flag, or the variable it is read from. */
const SOURCE_OF = new Map<string, string>([
  ['session', '--session'],
  ['data', '--data'],
  ['postgres', '--postgres'],
  ['provider', '--provider'],
  ['pace', 'ACTORLOOP_DEMO_PACE'],
  ['port', '--port'],
  ['host', '--host'],
  ['allowedHosts', '--allowed-host'],
  ['leaseMs', '--lease-ms'],
]);

/** The sources whose value is a database URL: shown with its password as `***`. */
const URL_SOURCES = new Set(['--postgres', DATABASE_URL_ENV]);

/** A value as an error shows it after `got`: JSON, a database URL without its password. */
const shown = (source: string, value: unknown): string =>
  JSON.stringify(URL_SOURCES.has(source) && typeof value === 'string' ? redactUrl(value) : value);

/**
 * Parses the value of one flag or variable (`source`: `--from`, `ACTORLOOP_DATABASE_URL`) with a
 * zod schema. A bad value is a usage error (exit 2) in one form for every option:
 * `--from: a whole number such as 12 (got "abc")`, a database URL's password shown as `***`.
 */
export function parseArg<T extends z.ZodType>(schema: T, value: unknown, source: string): z.output<T> {
  const r = schema.safeParse(value);
  if (!r.success)
    throw new CliError(`${source}: ${r.error.issues.map((i) => i.message).join('; ')} (got ${shown(source, value)})`, EXIT.usage);
  return r.data;
}

/**
 * Parses the options object of `command` (`demo`, `web`) with a zod schema. Each bad option is
 * named by its flag or variable with its value, as `parseArg` names one:
 * `--session: a session id is required (got "")`; never the whole object.
 */
export function parseOptions<T extends z.ZodType>(schema: T, options: object, command: string): z.output<T> {
  const r = schema.safeParse(options);
  if (r.success) return r.data;
  const given = new Map(Object.entries(options));
  const problems = r.error.issues.map((issue) => {
    const [key, ...rest] = issue.path;
    const source = typeof key === 'string' ? SOURCE_OF.get(key) : undefined;
    if (source === undefined || !given.has(key as string)) return `${command}: ${issue.message}`;
    // a list's item (`--allowed-host` given twice): the bad one
    let value: unknown = given.get(key as string);
    for (const i of rest) value = Array.isArray(value) && typeof i === 'number' ? (value as unknown[])[i] : undefined;
    return `${source}: ${issue.message} (got ${shown(source, value)})`;
  });
  throw new CliError(problems.join('; '), EXIT.usage);
}

/** The message and exit code for anything a command threw. */
export function describeFailure(e: unknown): { message: string; exitCode: number } {
  if (e instanceof CliError) return { message: e.message, exitCode: e.exitCode };
  // the store's own file, no session's record: the data dir is named, not a session called "(store)"
  if (isCorruptLogError(e) && e.sessionId === '(store)' && e.seq === 0) {
    const unchanged = /nothing was changed/.test(e.reason) ? '' : ' Nothing was changed.';
    return { message: `corrupt data dir: ${e.reason}.${unchanged}`, exitCode: EXIT.corrupt };
  }
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
      message:
        `${e.message}: the CLI defines only the demo agent; ` +
        `open this session with a runtime that defines ${JSON.stringify(e.agentName)}`,
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
