import { ActorloopError, CorruptLogError, StoreError } from '../contracts/errors.js';

/**
 * lmdb-js throws LMDB's own failures as plain Errors whose message starts with the MDB code
 * (`MDB_CORRUPTED: Located page was wrong type`). Those that say the file's pages are damaged
 * become a CorruptLogError naming the session and seq being read (or `(store)`, seq 0), and so
 * does any MDB error of a read (a read fails only on damaged pages: a flipped flag bit gives
 * `MDB_BAD_TXN: Invalid dupdata flag`); every other MDB error of a write, and every system error
 * (`ENOENT`, `EIO`, …), a StoreError. Errors of our own
 * pass through unchanged, and so does anything else (a bug, whose stack matters).
 */
const DAMAGE = /MDB_CORRUPTED|MDB_PAGE_NOTFOUND|MDB_INVALID|MDB_VERSION_MISMATCH|MDB_BAD_VALSIZE/;
const LMDB = /\bMDB_[A-Z_]+/;

export interface Place {
  /** The store's directory. */
  path: string;
  sessionId?: string;
  seq?: number;
  /** A read (the default) or the write transaction. */
  op?: 'read' | 'write';
}

export function storeFailure(e: unknown, place: Place): unknown {
  if (e instanceof ActorloopError || !(e instanceof Error)) return e;
  const message = e.message.split('\n')[0] ?? '';
  const at = place.sessionId === undefined ? `${place.path}/data.mdb` : `${place.sessionId}#${place.seq ?? 0}`;
  if (DAMAGE.test(message) || (place.op !== 'write' && LMDB.test(message))) {
    return new CorruptLogError(
      place.sessionId ?? '(store)',
      place.seq ?? 0,
      `LMDB reports damaged pages in ${place.path}/data.mdb (${message}); ` +
        `run \`actorloop verify ${place.path}\` to see the extent and \`actorloop repair ${place.path}\` to rebuild it from the journal`,
    );
  }
  const errno = (e as NodeJS.ErrnoException).code;
  if (LMDB.test(message) || (typeof errno === 'string' && typeof (e as NodeJS.ErrnoException).syscall === 'string')) {
    return new StoreError(at, message, {
      cause: e,
      ...(place.sessionId === undefined ? {} : { sessionId: place.sessionId }),
      ...(place.seq === undefined ? {} : { seq: place.seq }),
    });
  }
  return e;
}

/** Runs `fn`, mapping what it throws with storeFailure. */
export function guarded<T>(place: Place, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw storeFailure(e, place);
  }
}
