import { ActorloopError, StoreUnavailableError } from '../../contracts/errors.js';
import type { EventRecord } from '../../contracts/events.js';
import { applyAppend } from '../append-core.js';
import type { PreparedDraft } from '../codec.js';
import type { SessionHead } from '../head.js';
import { isConnectionError, type Connections } from './connection.js';
import { sqlStateOf, type PgPoolClient } from './pg-types.js';
import { appendValues, headOf, SnapshotTxn, type Statements } from './rows.js';
import { notifyQuery } from './schema.js';

export interface AppendSettings {
  stmts: Statements;
  channel: string;
  conns: Connections;
  /** `BEGIN` plus the transaction's timeouts, as one simple query (one round trip). */
  begin: string;
  lockTimeoutMs: number;
  /** Fault-injection hook: inside the transaction, after the writes, before COMMIT. */
  beforeCommit?: (sessionId: string) => unknown;
}

type Written = 'committed' | 'fence' | 'duplicate' | 'unknown' | 'retry';

/** How often a write that failed without landing (or whose outcome is being resolved) is tried. */
const MAX_TRIES = 8;
const backoff = (n: number) => new Promise((r) => setTimeout(r, Math.min(1000, 25 * 2 ** n)));

/** Heads of sessions this store appended to recently: the next append needs no read first. */
export class HeadCache {
  private readonly heads = new Map<string, SessionHead>();
  constructor(private readonly max = 10_000) {}
  get(sid: string) {
    return this.heads.get(sid);
  }
  set(h: SessionHead) {
    this.heads.delete(h.sessionId);
    this.heads.set(h.sessionId, h);
    if (this.heads.size > this.max) this.heads.delete(this.heads.keys().next().value!);
  }
  drop(sid: string) {
    this.heads.delete(sid);
  }
}

/**
 * One append (DESIGN §2) as one PostgreSQL transaction. The checks run on what the store knows
 * (its cached head: the head at a given head_seq is a function of the immutable log before it),
 * and the transaction's fence (`writer_epoch = $e AND head_seq = $s`) and unique event-id index
 * prove that knowledge current. When either refuses, the session's row and the batch's ids are
 * read and the checks run again in the contract's order (stale writer, invariant, idempotent
 * retry, sequence). A COMMIT whose reply was lost is resolved the same way, after waiting for the
 * session row (so the lost transaction has ended): the batch is found stored, or known absent.
 */
export async function appendTxn(
  s: AppendSettings,
  heads: HeadCache,
  sessionId: string,
  writerEpoch: number,
  expectedSeq: number,
  drafts: readonly PreparedDraft[],
): Promise<{ records: EventRecord[]; written: boolean }> {
  let batch = drafts;
  let waitForRow = false;
  let unknown = false;
  let lastError: unknown;
  for (let tries = 0; tries < MAX_TRIES; tries++) {
    let txn: SnapshotTxn;
    const cached = waitForRow || drafts.length === 0 ? undefined : heads.get(sessionId); // (an empty batch still checks the epoch)
    if (cached && cached.lastSeq + 1 === expectedSeq) {
      txn = new SnapshotTxn(sessionId, { ...cached, writerEpoch });
    } else {
      try {
        txn = await snapshot(s, sessionId, batch, waitForRow);
      } catch (e) {
        // a connection that broke or could not be made: ask again; anything else ends the append
        const transient = isConnectionError(e) || (e instanceof StoreUnavailableError && e.outcome === 'not_written');
        if (!transient) {
          if (e instanceof ActorloopError && !(e instanceof StoreUnavailableError)) throw e; // a corrupt row, …
          throw new StoreUnavailableError(
            `session ${sessionId}: reading the session for an append failed: ${(e as Error).message}`,
            unknown ? 'unknown' : e instanceof StoreUnavailableError ? e.outcome : 'not_written',
            { cause: e, ...(sqlStateOf(e) ? { sqlState: sqlStateOf(e)! } : {}) },
          );
        }
        lastError = e;
        await backoff(tries);
        continue;
      }
    }
    const out = applyAppend(txn, sessionId, writerEpoch, expectedSeq, batch, new Date().toISOString());
    if (!out.written) {
      // an idempotent retry — or the batch whose COMMIT reply was lost, found stored: new to followers
      return { records: out.records, written: unknown };
    }
    const before = txn.head() ?? out.head;
    const result = await write(s, sessionId, writerEpoch, before, out.head, txn.events);
    if (result === 'committed') {
      heads.set(out.head);
      return { records: out.records, written: true };
    }
    heads.drop(sessionId);
    if (result === 'unknown') {
      // the lost COMMIT may have landed: from here on the batch's ids are its own (generated ones
      // included), so that finding them stored is recognised as this very batch
      unknown = true;
      waitForRow = true;
      batch = batch.map((d, i) => ({ ...d, eventId: out.records[i]!.eventId, callerId: true }));
    } else if (result === 'retry') {
      await backoff(tries);
    }
    // 'fence' / 'duplicate': the snapshot was stale; read it fresh and check again
  }
  throw new StoreUnavailableError(
    unknown
      ? `session ${sessionId}: the commit of an append lost its reply and the server could not be asked whether it landed`
      : `session ${sessionId}: PostgreSQL append failed ${MAX_TRIES} times without landing`,
    unknown ? 'unknown' : 'not_written',
    { cause: lastError },
  );
}

/** The session's row and the stored events carrying the batch's ids, read fresh. */
async function snapshot(s: AppendSettings, sessionId: string, drafts: readonly PreparedDraft[], waitForRow: boolean): Promise<SnapshotTxn> {
  const ids = drafts.filter((d) => d.callerId).map((d) => d.eventId);
  return s.conns.with(async (c) => {
    let headRow: unknown;
    if (waitForRow) {
      // FOR SHARE waits until a transaction holding the row (the one whose COMMIT reply was
      // lost) has ended, committed or not; later statements then see its outcome
      try {
        await c.query(`BEGIN; SET LOCAL lock_timeout = ${s.lockTimeoutMs}`);
        headRow = (await c.query({ ...s.stmts.headForShare, values: [sessionId] })).rows[0];
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw e;
      }
    } else {
      headRow = (await c.query({ ...s.stmts.head, values: [sessionId] })).rows[0];
    }
    const stored = ids.length ? (await c.query({ ...s.stmts.byIds, values: [sessionId, ids] })).rows : [];
    return new SnapshotTxn(sessionId, headRow === undefined ? undefined : headOf(sessionId, headRow), stored as never[]);
  });
}

async function write(
  s: AppendSettings,
  sessionId: string,
  writerEpoch: number,
  before: SessionHead,
  next: SessionHead,
  events: readonly { record: EventRecord; text: string }[],
): Promise<Written> {
  let conn;
  try {
    conn = await s.conns.acquire();
  } catch (e) {
    if (e instanceof StoreUnavailableError && e.outcome === 'not_written') return 'retry';
    throw e;
  }
  const c: PgPoolClient = conn.client;
  let commitSent = false;
  let broken = false;
  try {
    await c.query(s.begin);
    const values = appendValues(
      { ...before, sessionId },
      next,
      writerEpoch,
      events.map((e) => e.record),
      events.map((e) => e.text),
    );
    const r = await c.query({ ...s.stmts.append, values });
    if ((r.rows[0] as { fenced: number }).fenced !== 1) {
      await c.query('ROLLBACK');
      return 'fence';
    }
    try {
      await s.beforeCommit?.(sessionId);
    } catch (e) {
      await c.query('ROLLBACK').catch(() => (broken = true));
      throw Object.assign(new Error('beforeCommit threw'), { hookError: e });
    }
    commitSent = true;
    // the wake-up rides in the COMMIT's message but in a transaction of its own, which flushes
    // nothing: inside the append it would serialise every commit of the database (notifyQuery)
    await c.query(`COMMIT; ${notifyQuery(s.channel, sessionId)}`);
    return 'committed';
  } catch (e) {
    const hookError = (e as { hookError?: unknown }).hookError;
    if (hookError !== undefined) throw hookError; // the hook's throw aborts the append, as it is
    broken = isConnectionError(e);
    if (commitSent) {
      broken = true;
      return 'unknown';
    }
    if (!broken) await c.query('ROLLBACK').catch(() => (broken = true));
    const state = sqlStateOf(e);
    if (state === '23505') return 'duplicate'; // an id already stored: the checks say which rule applies
    if (broken || state === '40P01' || state === '40001') return 'retry'; // nothing of it landed
    throw new StoreUnavailableError(`session ${sessionId}: PostgreSQL refused the append: ${(e as Error).message}`, 'not_written', {
      cause: e,
      ...(state ? { sqlState: state } : {}),
    });
  } finally {
    conn.done(broken);
  }
}
