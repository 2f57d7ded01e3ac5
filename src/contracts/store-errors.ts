import { ActorloopError, hasCode } from './error-base.js';

/** The stores' own failures (errors.ts re-exports them). */

/**
 * The store (or runtime) was closed; nothing more can be written through it.
 * @example
 * if (isStoreClosedError(e)) reopen()
 */
export class StoreClosedError extends ActorloopError {
  readonly code = 'store_closed' as const;
  override readonly name = 'StoreClosedError';
  constructor(what = 'store') {
    super(`${what} is closed`);
  }
}
export const isStoreClosedError = (e: unknown): e is StoreClosedError => hasCode(e, 'store_closed');

/**
 * The store's server could not be reached or refused the operation (a dropped connection, a lock
 * or transaction timeout, a schema this version does not know). `outcome` says what became of
 * the write: `not_written` — nothing of it is stored (it failed before or without landing);
 * `unknown` — it may have landed: the connection was lost after the statement was sent, and its
 * commit could not be confirmed or ruled out; `none` — the operation writes nothing (a read).
 * A failed `runtime.submit` carries the entry's id as `entryId` (for an input, its `inputId`,
 * generated for a bare-string prompt): submit again with that id and a landed entry is recognised
 * (`already_accepted`) instead of stored twice.
 * @example
 * if (isStoreUnavailableError(e) && e.outcome === 'unknown' && e.entryId)
 *   await runtime.submit(sid, { kind: 'input', inputId: e.entryId, mode: 'follow_up', message: 'hello' })
 */
export class StoreUnavailableError extends ActorloopError {
  readonly code = 'store_unavailable' as const;
  override readonly name = 'StoreUnavailableError';
  constructor(
    message: string,
    readonly outcome: 'not_written' | 'unknown' | 'none',
    options: { cause?: unknown; sqlState?: string; entryId?: string } = {},
  ) {
    super(message, { cause: options.cause });
    if (options.sqlState !== undefined) this.sqlState = options.sqlState;
    if (options.entryId !== undefined) this.entryId = options.entryId;
  }
  /** The server's SQLSTATE, when it answered with one. */
  readonly sqlState?: string;
  /** The inbox entry a failed `runtime.submit` was writing (an input's `inputId`): retry with it. */
  readonly entryId?: string;
}
export const isStoreUnavailableError = (e: unknown): e is StoreUnavailableError => hasCode(e, 'store_unavailable');

/**
 * The store's files could not be used: a journal segment or directory removed under an open
 * store, an LMDB failure that is not damage to a record (`MDB_BAD_TXN`, a full map, …), a
 * verification or repair that could not run. What it names is given as `where` (a file, or
 * `session#seq`); nothing was committed by the call that failed with it.
 * @example
 * if (isStoreError(e)) console.error(`store trouble at ${e.where}: ${e.reason}`)
 */
export class StoreError extends ActorloopError {
  readonly code = 'store' as const;
  override readonly name = 'StoreError';
  readonly sessionId?: string;
  readonly seq?: number;
  constructor(
    readonly where: string,
    readonly reason: string,
    options: { sessionId?: string; seq?: number; cause?: unknown } = {},
  ) {
    super(`store error at ${where}: ${reason}`, options.cause === undefined ? undefined : { cause: options.cause });
    if (options.sessionId !== undefined) this.sessionId = options.sessionId;
    if (options.seq !== undefined) this.seq = options.seq;
  }
}
export const isStoreError = (e: unknown): e is StoreError => hasCode(e, 'store');

/**
 * A session's writer found records in the log at its own writer epoch that it cannot go on from
 * (log-writer.ts): records it did not write, past the seq it expected (after an append refused
 * with a sequence conflict or whose answer was lost) — no other writer writes at that epoch, so
 * the log and the writer disagree — or a batch whose append it had reported failed, found landed
 * later (its caller acted on the failure). The writer is fenced (it commits nothing more and
 * starts no effect), never retried; reopening the session recovers from the log.
 * @example
 * if (isLogDivergedError(e)) console.error(`${e.sessionId}: seqs ${e.fromSeq}..${e.lastSeq} at epoch ${e.writerEpoch}: ${e.reason}`)
 */
export class LogDivergedError extends ActorloopError {
  readonly code = 'log_diverged' as const;
  override readonly name = 'LogDivergedError';
  constructor(
    readonly sessionId: string,
    readonly writerEpoch: number,
    readonly fromSeq: number,
    readonly lastSeq: number,
    readonly reason: string,
  ) {
    super(
      `session ${sessionId}: the log at writer epoch ${writerEpoch} holds seqs ${fromSeq}..${lastSeq} ` +
        `its writer cannot go on from: ${reason}`,
    );
  }
}
export const isLogDivergedError = (e: unknown): e is LogDivergedError => hasCode(e, 'log_diverged');
