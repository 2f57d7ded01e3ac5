import { ActorloopError, StoreUnavailableError } from '../../contracts/errors.js';
import { sqlStateOf, type PgPool, type PgPoolClient } from './pg-types.js';

/**
 * Failures that mean the connection (not the statement) broke: no SQLSTATE at all (a socket
 * error, "Connection terminated unexpectedly"), connection exceptions (08…), the server shutting
 * down or killing the session (57P…, an idle-in-transaction timeout 25P03), too many connections.
 */
export function isConnectionError(e: unknown): boolean {
  if (e instanceof ActorloopError) return false; // our own (a corrupt row, a refused setting)
  const state = sqlStateOf(e);
  return state === undefined || state.startsWith('08') || state.startsWith('57P') || state === '25P03' || state === '53300';
}

/** synchronous_commit levels, weakest first. */
const LEVELS = ['off', 'local', 'remote_write', 'on', 'remote_apply'];

const guardedPools = new WeakSet<object>();
const guardedClients = new WeakSet<object>();
const ignore = () => undefined;

/**
 * Gives `client` an error listener for its whole life (once). An error while no query runs (the
 * server ended the session) must not crash the process; the next query on the client fails and
 * its caller handles that.
 */
function guardClient(client: PgPoolClient): void {
  if (guardedClients.has(client)) return;
  guardedClients.add(client);
  client.on('error', ignore);
}

/**
 * Guards every client of `pool` from the moment pg-pool hands it out: pg-pool removes its own idle
 * error listener right after emitting 'acquire' and before `connect()` resolves, so an error that
 * arrives in the same read as the connection's ready message (a backend terminated as it opens)
 * would find no listener by the time `acquire` below could add one. A pool without `on('acquire')`
 * (not a pg.Pool) gets its clients guarded in `acquire`.
 */
export function guardPool(pool: PgPool): void {
  if (guardedPools.has(pool) || typeof pool.on !== 'function') return;
  guardedPools.add(pool);
  pool.on('acquire', guardClient);
}

/** A connection checked out for one operation; `done(broken)` returns (or destroys) it. */
export interface Conn {
  client: PgPoolClient;
  done(broken?: boolean): void;
}

/**
 * Checks connections out of the pool. A connection is checked once, on its first use, for
 * `synchronous_commit`: below `on`, an append could resolve before its commit is flushed, so it is
 * refused unless the store was opened with durability 'committed'.
 */
export class Connections {
  private readonly checked = new WeakSet<PgPoolClient>();
  constructor(
    private readonly pool: () => PgPool,
    private readonly requireFlush: boolean,
  ) {}

  async acquire(): Promise<Conn> {
    let client: PgPoolClient;
    try {
      const pool = this.pool();
      guardPool(pool);
      client = await pool.connect();
    } catch (e) {
      throw new StoreUnavailableError(`cannot connect to PostgreSQL: ${(e as Error).message}`, 'not_written', { cause: e });
    }
    guardClient(client);
    let released = false;
    const done = (broken = false) => {
      if (released) return;
      released = true;
      client.release(broken ? true : undefined);
    };
    if (!this.checked.has(client)) {
      try {
        await this.check(client);
      } catch (e) {
        done(isConnectionError(e));
        if (!isConnectionError(e)) throw e;
        throw new StoreUnavailableError(`PostgreSQL connection failed: ${(e as Error).message}`, 'not_written', { cause: e });
      }
      this.checked.add(client);
    }
    return { client, done };
  }

  private async check(client: PgPoolClient): Promise<void> {
    const r = await client.query(`SELECT current_setting('synchronous_commit') AS level`);
    const level = String((r.rows[0] as { level: unknown }).level);
    if (this.requireFlush && LEVELS.indexOf(level) < LEVELS.indexOf('on')) {
      throw new StoreUnavailableError(
        `PostgreSQL synchronous_commit is '${level}': an append could resolve before its commit is flushed. ` +
          `Set it to 'on' (or stronger) for this role or database, or open the store with durability: 'committed' to accept it`,
        'not_written',
      );
    }
  }

  /** Runs `fn` on a connection; a connection error destroys the connection. */
  async with<T>(fn: (c: PgPoolClient) => Promise<T>): Promise<T> {
    const conn = await this.acquire();
    let broken = false;
    try {
      return await fn(conn.client);
    } catch (e) {
      broken = isConnectionError(e);
      throw e;
    } finally {
      conn.done(broken);
    }
  }
}

/**
 * A store-level error for a failed operation. `read`: the operation writes nothing (outcome
 * `none`). `write`: a connection that broke while the statement ran may have committed it (outcome
 * `unknown`); a statement the server refused wrote nothing (`not_written`). Our own errors (a
 * connection that could not be made: `not_written`) pass through as they are.
 */
export function unavailable(what: string, e: unknown, kind: 'read' | 'write'): unknown {
  if (e instanceof ActorloopError) return e;
  const state = sqlStateOf(e);
  const outcome = kind === 'read' ? 'none' : isConnectionError(e) ? 'unknown' : 'not_written';
  return new StoreUnavailableError(`PostgreSQL ${what} failed: ${(e as Error).message}`, outcome, {
    cause: e,
    ...(state ? { sqlState: state } : {}),
  });
}
