import { closeSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import type { SessionHead } from '../persistence/head.js';
import { lmdbStore } from '../persistence/lmdb-store.js';
import { postgresStore } from '../persistence/postgres/postgres-store.js';
import { CliError, EXIT, parseArg, redactUrl } from './errors.js';
import { command, quote } from './invocation.js';

export const DEFAULT_DATA_DIR = './.actorloop';

export const SessionId = z.string().min(1, 'a session id is required').max(400, 'at most 400 characters');

/** `--data`: a directory path (created by `demo` and `web` when absent). */
export const DataDir = z.string().min(1, 'a directory is required');

/** The absolute data dir for `--data` (default ./.actorloop). */
export const dataDirOf = (flag: string | undefined): string => resolve(flag ?? DEFAULT_DATA_DIR);

/**
 * Opens the LMDB store of an existing data dir. Read-only commands use this: they never create a
 * data dir, and a folder without an LMDB file is refused (exit 4).
 */
export function openExistingStore(dir: string): EventStore {
  const stats = statOf(dir, dir);
  if (!stats) {
    // the hint's demo writes this very dir (a demo without --data writes ./.actorloop)
    const hint =
      dir === dataDirOf(undefined)
        ? `run \`${command('demo')}\` first, or pass --data DIR`
        : `run \`${command(`demo --data ${quote(dir)}`)}\` first`;
    throw new CliError(`no actorloop data at ${dir}: ${hint}`, EXIT.notFound);
  }
  if (!stats.isDirectory() || !statOf(join(dir, 'data.mdb'), dir)) {
    throw new CliError(`${dir} is not an actorloop data dir (it has no data.mdb)`, EXIT.notFound);
  }
  // lmdb-js crashes the process (SIGSEGV) on a file that is not an LMDB environment: checked first
  if (!openingDataDir(dir, () => isLmdbFile(join(dir, 'data.mdb')))) throw notLmdb(dir);
  // a store written without a journal (durability 'committed') is read as it is: a 'flushed' open
  // would give it a journal, after which the app's own 'committed' opens are refused
  const durability = statOf(join(dir, 'journal'), dir) ? 'flushed' : 'committed';
  return openingDataDir(dir, () => lmdbStore({ path: dir, durability }));
}

/** Why this user cannot open a data dir (for a one-line error), or undefined for any other failure. */
function accessProblem(e: unknown): string | undefined {
  if (!(e instanceof Error)) return undefined;
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'EROFS' || /Read-only file system/i.test(e.message)) return 'read-only file system';
  if (code === 'EACCES' || code === 'EPERM' || /Permission denied/i.test(e.message)) return 'permission denied';
  return undefined;
}

/**
 * Runs `open` on the data dir `dir`, turning a dir this user may not write into one clear line
 * (exit 4): LMDB writes its lock file (lock.mdb) even to read, and opening a store takes its
 * recovery lock (recovery/).
 */
export function openingDataDir<T>(dir: string, open: () => T): T {
  try {
    return open();
  } catch (e) {
    const why = accessProblem(e);
    if (why === undefined) throw e;
    throw new CliError(
      `cannot open the data dir ${dir}: ${why} (LMDB writes its lock file even to read, and opening takes the store's recovery lock: ` +
        'run as a user who may write the dir)',
      EXIT.notFound,
    );
  }
}

/**
 * What is at `path` (the data dir `dir` or a file in it): its stats, or undefined when nothing is
 * there. A path this user may not look at (a dir of another user, 0700) is not taken for an absent
 * one: it is one clear line naming `dir`, exit 4.
 */
export function statOf(path: string, dir: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch (e) {
    const why = accessProblem(e);
    if (why === undefined) throw e;
    throw new CliError(
      `cannot open the data dir ${dir}: ${why} (this user may not look into it: run as a user who may read and write the dir)`,
      EXIT.notFound,
    );
  }
}

const notLmdb = (dir: string) =>
  new CliError(
    `${dir}/data.mdb is not an LMDB data file (no LMDB meta page): it is damaged or not actorloop's; nothing was changed`,
    EXIT.corrupt,
  );

/**
 * A data dir a command may create: absent, or a directory (a file there is one clear line, exit
 * 4) whose data.mdb, if any, is an LMDB file or has a journal to rebuild it from (else one clear
 * line, exit 3, before anything is written to the dir).
 */
export function requireDirOrAbsent(dir: string): void {
  const stats = statOf(dir, dir);
  if (stats && !stats.isDirectory()) {
    throw new CliError(`${dir} is not an actorloop data dir (it is a file, not a directory)`, EXIT.notFound);
  }
  const data = join(dir, 'data.mdb');
  if (stats && statOf(data, dir) && !statOf(join(dir, 'journal'), dir) && !openingDataDir(dir, () => isLmdbFile(data))) {
    throw notLmdb(dir);
  }
}

/**
 * Opens the store `demo` and `web` write (the data dir `dir`, created when absent, or the
 * PostgreSQL database `postgres`), then `prepare`s the demo's files in the dir: a store that
 * cannot be opened leaves the dir without them.
 */
export function openDemoStore(dir: string, postgres: string | undefined, prepare: () => void): EventStore {
  requireDirOrAbsent(dir);
  return openingDataDir(dir, () => {
    const store = postgres ? postgresStore({ connectionString: postgres }) : lmdbStore({ path: dir });
    try {
      prepare();
    } catch (e) {
      void store.close().catch(() => undefined);
      throw e;
    }
    return store;
  });
}

/** LMDB's magic number (0xBEEFC0DE) in the first meta page, where this build or stock LMDB puts it. */
function isLmdbFile(path: string): boolean {
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(32);
    const n = readSync(fd, head, 0, 32, 0);
    return (n >= 20 && head.readUInt32LE(16) === 0xbeefc0de) || (n >= 28 && head.readUInt32LE(24) === 0xbeefc0de);
  } finally {
    closeSync(fd);
  }
}

export const PostgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\//, 'a postgres:// URL such as postgres://user@host:5432/db')
  .refine((u) => URL.canParse(u), 'not a valid URL');

/** Where a command's log lives: the LMDB data dir, or a PostgreSQL database (`--postgres`). */
export interface StoreSource {
  store: EventStore;
  /** For messages: the data dir, or the database URL without its password. */
  where: string;
  /** The flag that names this source again, for hints (`--data DIR`, `--postgres URL`). */
  flag: string;
}

/**
 * Opens the store a read command names: `--postgres URL` (or ACTORLOOP_DATABASE_URL) — whose
 * schema must already exist (read commands never migrate) — else the LMDB data dir.
 */
export function openSource(opts: { data?: string; postgres?: string }): StoreSource {
  if (opts.postgres !== undefined) {
    const url = parseArg(PostgresUrl, opts.postgres, '--postgres');
    if (opts.data !== undefined) throw new CliError('--data and --postgres name two different logs: pass one of them', EXIT.usage);
    return { store: postgresStore({ connectionString: url, migrate: false }), where: redactUrl(url), flag: `--postgres ${redactUrl(url)}` };
  }
  const dir = dataDirOf(opts.data);
  return { store: openExistingStore(dir), where: dir, flag: `--data ${dir}` };
}

/** The session's head, or a clear "unknown session" error (exit 4). */
export async function requireSession(
  store: EventStore,
  source: string | Omit<StoreSource, 'store'>,
  sessionId: string,
): Promise<SessionHead> {
  const { where, flag } = typeof source === 'string' ? { where: source, flag: `--data ${source}` } : source;
  const id = parseArg(SessionId, sessionId, 'session');
  const head = await store.getHead(id);
  if (!head || head.lastSeq === 0) {
    throw new CliError(
      `unknown session ${JSON.stringify(id)} in ${where}: \`${command(`sessions ${flag}`)}\` lists the sessions`,
      EXIT.notFound,
    );
  }
  return head;
}

/** Reads a session's events into memory (for `view`; `log` streams instead). */
export async function readAll(store: EventStore, sessionId: string, fromSeq = 1): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(sessionId, { fromSeq })) out.push(e);
  return out;
}

/** Runs `fn` with the store, closing it afterwards whatever happens. */
export async function withStore<T>(store: EventStore, fn: (s: EventStore) => Promise<T>): Promise<T> {
  try {
    return await fn(store);
  } finally {
    await store.close().catch(() => undefined);
  }
}
