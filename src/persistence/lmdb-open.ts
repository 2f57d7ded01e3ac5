import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ActorloopError, CorruptLogError, StoreError, ValidationError } from '../contracts/errors.js';
import { inspectDataFile } from './data-file.js';
import { Journal } from './journal.js';
import { currentBootId, openDbs, readState, recover, type LogDbs } from './journal-recovery.js';
import { DIR_MODE, ownerOnly } from './journal-files.js';

/** A 'committed' open (or commit) of a path that has a journal. */
export const journaledPathError = (path: string) =>
  new ValidationError('lmdbStore', [
    { path: ['durability'], message: `${path} has a journal (it was opened with durability 'flushed'); open it with 'flushed'` },
  ]);

/**
 * Opens the environment and its databases. Opening races another process that is growing
 * the same file can fail inside lmdb-js with MDB's "No transaction to renew" (seen under heavy
 * load in test/persistence/lmdb-multiprocess.test.ts); that open is retried a few times.
 */
function openEnv(path: string): LogDbs {
  for (let attempt = 1; ; attempt++) {
    let dbs: LogDbs | undefined;
    try {
      // Never flushed by LMDB: in 'flushed' mode the journal is what a commit flushes.
      return (dbs = openDbs(path));
    } catch (e) {
      void dbs?.env.close();
      if (attempt >= 5 || !/No transaction to renew/.test(String((e as Error)?.message))) throw e;
    }
  }
}

/**
 * Makes the store's directory if it is missing; whether it made it. A path that is a file, or lies
 * under one, or that cannot be made is a StoreError naming it (never the raw EEXIST or ENOTDIR).
 */
function storeDirectory(path: string): boolean {
  try {
    // mkdirSync returns the first folder it made: undefined when `path` existed (it keeps its mode)
    return mkdirSync(path, { recursive: true, mode: DIR_MODE }) !== undefined;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const reason =
      code === 'EEXIST' || code === 'ENOTDIR'
        ? `not a directory: ${code === 'EEXIST' ? 'it is a file' : 'a part of it is a file'}; ` +
          "an LMDB store's path is a directory, or does not exist yet"
        : `its directory cannot be made: ${(e as Error).message}`;
    throw new StoreError(path, reason, { cause: e });
  }
}

/**
 * Opens an LMDB store's directory: its databases, and in 'flushed' mode its write-ahead journal.
 * LMDB itself never flushes (noSync). In 'flushed' mode each write transaction ends by
 * writing its journal frame and fdatasync-ing it, still inside transactionSync, so the frame
 * is on disk before LMDB commits and before any append of the group resolves; recover()
 * first rebuilds the LMDB file from the journal if the machine restarted since it was written.
 */
export function openLmdbStore(
  path: string,
  durability: 'flushed' | 'committed',
  bootId: string | undefined,
): { dbs: LogDbs; journal: Journal | null } {
  try {
    return openAt(path, durability, bootId);
  } catch (e) {
    // a system error (EISDIR, EACCES, …) of a file the store cannot use: a StoreError naming the path
    const errno = e as NodeJS.ErrnoException;
    if (e instanceof ActorloopError || !(e instanceof Error) || typeof errno.code !== 'string' || typeof errno.syscall !== 'string')
      throw e;
    throw new StoreError(path, `the store cannot be opened: ${e.message}`, { cause: e });
  }
}

function openAt(path: string, durability: 'flushed' | 'committed', bootId: string | undefined): { dbs: LogDbs; journal: Journal | null } {
  const created = storeDirectory(path);
  let journal: Journal | null;
  if (durability === 'flushed') {
    journal = new Journal(join(path, 'journal'));
    recover(path, journal, bootId ?? currentBootId());
  } else {
    // Commits made without the journal would be missing from a rebuild: a journaled store
    // refuses them (a store without a journal is adopted by its first 'flushed' open instead).
    if (existsSync(join(path, 'journal'))) throw journaledPathError(path);
    const data = inspectDataFile(path);
    if (data.state === 'damaged')
      throw new CorruptLogError('(store)', 0, `${path}/${data.reason}, and a store without a journal cannot be rebuilt`);
    journal = null;
  }
  const dbs = openEnv(path);
  ownerOnly(path, { created });
  // the journal's segments must reach the end this file recorded: a segment removed or cut
  // short is named now, while the LMDB file still has everything (`actorloop repair` rebuilds
  // the journal from it), not after the next restart, when the rebuild would need it
  if (journal) {
    try {
      journal.assertReaches(readState(dbs, path));
    } catch (e) {
      void dbs.env.close();
      throw e;
    }
  }
  return { dbs, journal };
}
