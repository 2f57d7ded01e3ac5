import { randomInt } from 'node:crypto';
import { judgeHolder, publicHolder, thisProcess, type HolderRecord, type SessionHolder, type SessionHolders } from '../holders.js';
import { unavailable, type Conn, type Connections } from './connection.js';
import { ident } from './schema.js';

interface HolderRow {
  host: string;
  pid: number;
  start_time: string | null;
  worker_id: string | null;
  /** Whether the advisory lock the holder's store took is held now (its connection lives). */
  alive: boolean;
}

const recordOf = (r: HolderRow): HolderRecord => ({
  host: r.host,
  pid: r.pid,
  ...(r.start_time !== null ? { startTime: r.start_time } : {}),
  ...(r.worker_id !== null ? { workerId: r.worker_id } : {}),
});

/**
 * The PostgreSQL store's `holders` (holders.ts). While the store holds any session it keeps one
 * dedicated connection holding a session-level advisory lock on a key of its own (one connection
 * per store, never one per session); each held session's row in `session_holders` names that
 * key. A holder is live while its key is locked: a process that dies loses its connection and so
 * its lock at once, on any machine. A holder on this machine whose process is gone (or whose pid
 * was reused) is dead too, before the server has noticed the closed connection. Claims of one
 * session are serialised by a transaction-level advisory lock on its id.
 */
export class PgHolders implements SessionHolders {
  private readonly claims = new Map<string, number>();
  private lock?: { conn: Conn; key: [number, number] };
  private locking?: Promise<{ conn: Conn; key: [number, number] }>;
  private pending = 0;
  private readonly table: string;
  /** A session's holder row, and whether the advisory lock its store took is held now (`alive`). */
  private readonly holderQuery: string;

  constructor(
    private readonly conns: Connections,
    /** Where the lock's connection comes from: a pool of its own for a store that made its pool, else the app's pool. */
    private readonly lockConns: () => Connections,
    private readonly ready: () => Promise<void>,
    private readonly assertOpen: () => void,
    private readonly schema: string,
  ) {
    this.table = `${ident(schema)}.session_holders`;
    this.holderQuery =
      `SELECT host, pid, start_time, worker_id, lock_class, lock_obj, EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' ` +
      `AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) ` +
      `AND l.classid = h.lock_class::oid AND l.objid = h.lock_obj::oid AND l.objsubid = 2) AS alive ` +
      `FROM ${this.table} h WHERE session_id = $1`;
  }

  async claim(sessionId: string, options: { takeover: boolean; workerId?: string }): Promise<SessionHolder | undefined> {
    this.assertOpen();
    await this.ready();
    this.pending++;
    try {
      const { key } = await this.lockKey();
      const refused = await this.claimRow(sessionId, key, options);
      if (refused) return publicHolder(refused);
      this.claims.set(sessionId, (this.claims.get(sessionId) ?? 0) + 1);
      if (this.lock?.key !== key) {
        // its lock was lost while the row was written: the row moves to the lock taken now
        this.lostKeys.push(key);
        const now = await this.lockKey().catch(() => undefined);
        if (now) await this.relock(now.key);
      }
      return undefined;
    } finally {
      this.pending--;
      this.dropLockIfIdle();
    }
  }

  async holderOf(sessionId: string): Promise<SessionHolder | undefined> {
    this.assertOpen();
    await this.ready();
    let row: HolderRow | undefined;
    try {
      row = (await this.conns.with((c) => c.query({ text: this.holderQuery, values: [sessionId] }))).rows[0] as HolderRow | undefined;
    } catch (e) {
      throw unavailable('holderOf', e, 'read');
    }
    return row && judgeHolder(recordOf(row), row.alive) !== 'dead' ? publicHolder(recordOf(row)) : undefined;
  }

  async release(sessionId: string): Promise<void> {
    const n = (this.claims.get(sessionId) ?? 0) - 1;
    if (n > 0) {
      this.claims.set(sessionId, n);
      return;
    }
    this.claims.delete(sessionId);
    const key = this.lock?.key;
    try {
      if (key)
        await this.conns.with((c) =>
          c.query({
            text: `DELETE FROM ${this.table} WHERE session_id = $1 AND lock_class = $2 AND lock_obj = $3`,
            values: [sessionId, ...key],
          }),
        );
    } catch {
      // the row stays; its lock goes with this store's connection, and a later claim finds it dead
    } finally {
      this.dropLockIfIdle();
    }
  }

  /** Ends the lock's connection (the store is closing). */
  close(): void {
    this.claims.clear();
    this.dropLockIfIdle();
  }

  private async claimRow(
    sessionId: string,
    key: [number, number],
    options: { takeover: boolean; workerId?: string },
  ): Promise<HolderRecord | undefined> {
    const me = thisProcess();
    try {
      return await this.conns.with(async (c) => {
        await c.query('BEGIN');
        try {
          await c.query({
            text: 'SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))',
            values: [`actorloop-holder:${this.schema}`, sessionId],
          });
          const r = await c.query({ text: this.holderQuery, values: [sessionId] });
          const row = r.rows[0] as (HolderRow & { lock_class: string; lock_obj: string }) | undefined;
          const ours = row && Number(row.lock_class) === key[0] && Number(row.lock_obj) === key[1];
          if (row && !ours && !options.takeover && judgeHolder(recordOf(row), row.alive) === 'live') {
            await c.query('ROLLBACK');
            return recordOf(row);
          }
          await c.query({
            text:
              `INSERT INTO ${this.table} (session_id, host, pid, start_time, worker_id, lock_class, lock_obj) ` +
              'VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (session_id) DO UPDATE SET ' +
              'host = $2, pid = $3, start_time = $4, worker_id = $5, lock_class = $6, lock_obj = $7, since = now()',
            values: [sessionId, me.host, me.pid, me.startTime ?? null, options.workerId ?? null, ...key],
          });
          await c.query('COMMIT');
          return undefined;
        } catch (e) {
          await c.query('ROLLBACK').catch(() => undefined);
          throw e;
        }
      });
    } catch (e) {
      throw unavailable('openSession (holder check)', e, 'write');
    }
  }

  /** The dedicated connection and the key it holds locked, taken on the first claim. */
  private lockKey(): Promise<{ conn: Conn; key: [number, number] }> {
    if (this.lock) return Promise.resolve(this.lock);
    return (this.locking ??= (async () => {
      const conn = await this.lockConns().acquire();
      const key: [number, number] = [randomInt(1, 2 ** 31 - 1), randomInt(1, 2 ** 31 - 1)];
      try {
        await conn.client.query({ text: 'SELECT pg_advisory_lock($1, $2)', values: key });
      } catch (e) {
        conn.done(true);
        throw unavailable('openSession (holder lock)', e, 'read');
      }
      // a broken connection has lost the lock (the server ended it: an idle-session timeout, a
      // proxy, an admin): the sessions held or being claimed take a new one at once (relock)
      let broken = false;
      conn.client.on('error', () => {
        broken = true;
        if (this.lock?.conn === conn) this.lock = undefined;
        if (this.claims.size > 0 || this.pending > 0) {
          this.lostKeys.push(key);
          // (a claim under way takes it itself; a failed one is tried again at the next claim)
          if (this.lock === undefined && this.locking === undefined) void this.lockKey().catch(() => undefined);
        }
        conn.done(true);
      });
      await this.relock(key);
      if (broken) throw unavailable('openSession (holder lock)', new Error('the lock connection ended while it was taken'), 'read');
      this.lock = { conn, key };
      const lock = this.lock;
      this.dropLockIfIdle(); // everything released (or the store closed) meanwhile: nothing to hold
      return lock;
    })().finally(() => (this.locking = undefined)));
  }

  /** Keys whose lock was lost with its connection while this store's rows still name them. */
  private lostKeys: [number, number][] = [];

  /**
   * This store's holder rows under a lost key, of the sessions it still holds, moved to the new
   * one: they read as live again. A row another process claimed meanwhile (they read as dead until
   * now) is theirs and stays so; a move that fails is tried again at the next lock.
   */
  private async relock(key: [number, number]): Promise<void> {
    for (const lost of this.lostKeys.splice(0)) {
      // only the sessions still held: a row left by a release whose delete failed stays dead
      const held = [...this.claims.keys()];
      if (held.length === 0) continue;
      try {
        await this.conns.with((c) =>
          c.query({
            text: `UPDATE ${this.table} SET lock_class = $1, lock_obj = $2 WHERE lock_class = $3 AND lock_obj = $4 AND session_id = ANY($5)`,
            values: [...key, ...lost, held],
          }),
        );
      } catch {
        this.lostKeys.push(lost);
      }
    }
  }

  /** Ends the lock's connection once no session is held and no claim is under way (nothing left running). */
  private dropLockIfIdle(): void {
    if (this.claims.size > 0 || this.pending > 0 || !this.lock) return;
    const { conn } = this.lock;
    this.lock = undefined;
    conn.done(true); // destroyed, not returned to the pool: the server drops the lock with the connection
  }
}
