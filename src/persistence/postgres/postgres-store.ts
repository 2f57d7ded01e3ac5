import type { WorkStore } from '../work-store.js';
import type { Observable } from 'rxjs';
import { z } from 'zod';
import { CorruptLogError, StoreClosedError, StoreUnavailableError } from '../../contracts/errors.js';
import type { EventDraft, EventRecord } from '../../contracts/events.js';
import { parseInput } from '../../contracts/validate.js';
import { decodeRecord, findEvent, prepareDrafts } from '../codec.js';
import type { AttachResult, EventStore, ReadRange } from '../event-store.js';
import type { SessionHead } from '../head.js';
import { assertAppendArgs, assertEventId, assertSessionId, followFrom, readRange, surfaceOf } from '../store-input.js';
import { appendTxn, HeadCache, type AppendSettings } from './append.js';
import { Connections, guardPool, unavailable } from './connection.js';
import { Common, PostgresStoreOptions, type Options } from './options.js';
import type { PgModule, PgPool } from './pg-types.js';

export { PostgresStoreOptions } from './options.js';
import { headOf, statements, type Statements } from './rows.js';
import { channelOf, checkSchema, migrate } from './schema.js';
import { PgTail } from './tail.js';
import { PgWorkStore } from './work.js';
import { PgBlobs } from './blobs.js';
import type { BlobStore } from '../blob-store.js';
import { PgHolders } from './holders.js';

/** Loads `pg` on first use: an app that never opens a PostgreSQL store needs no `pg` installed. */
async function loadPg(): Promise<PgModule> {
  const specifier = 'pg';
  try {
    const mod = (await import(specifier)) as { default?: PgModule } & PgModule;
    return mod.default ?? mod;
  } catch (e) {
    throw new StoreUnavailableError(`postgresStore needs the 'pg' package: npm install pg (${(e as Error).message})`, 'not_written', {
      cause: e,
    });
  }
}

/**
 * An EventStore on PostgreSQL (DESIGN §8): the same log, fencing and guarantees as the LMDB
 * store, for several processes or machines sharing one database. Each append is one transaction
 * (fence on the session row, event-id idempotency, multi-row insert, head fields); `events$`
 * follows appends made by any process (LISTEN/NOTIFY as a wake-up). `pg` is loaded on first use.
 * @example
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL! })
 * const runtime = createRuntime({ store, model })
 */
export function postgresStore(
  options: PostgresStoreOptions,
): EventStore & PostgresStoreExtras & { readonly work: WorkStore; readonly blobs: BlobStore } {
  return new PostgresEventStore(parseInput(PostgresStoreOptions, options, 'postgresStore'));
}

/**
 * Applies the package's migrations to `schema` (what `actorloop migrate --postgres <url>` runs, for
 * deployments whose stores are opened with `migrate: false`). Returns the versions before and after.
 * @example
 * const { from, to } = await migratePostgres({ connectionString: process.env.DATABASE_URL! })
 */
export async function migratePostgres(options: { connectionString: string; schema?: string }): Promise<{ from: number; to: number }> {
  const o = parseInput(z.strictObject({ connectionString: z.string().min(1), schema: Common.schema }), options, 'migratePostgres');
  const pg = await loadPg();
  const pool = new pg.Pool({ connectionString: o.connectionString, max: 1 });
  pool.on('error', () => undefined);
  guardPool(pool);
  try {
    return await migrate(pool, o.schema);
  } catch (e) {
    throw unavailable('migrate', e, 'write');
  } finally {
    await pool.end();
  }
}

/**
 * What the PostgreSQL store offers beyond EventStore.
 * @example
 * const store = postgresStore({ connectionString })
 * await store.ready() // fail fast at boot: server reachable, synchronous_commit, schema version
 */
export interface PostgresStoreExtras {
  /** Connects, checks the server and applies (or checks) the migrations; every method does this on first use. */
  ready(): Promise<void>;
}

class PostgresEventStore implements EventStore, PostgresStoreExtras {
  private pool: PgPool | undefined;
  /** The holder lock's one connection, outside `maxConnections` (own pool only; an app's pool lends it). */
  private lockPool: PgPool | undefined;
  private readonly ownPool: boolean;
  private readonly conns: Connections;
  private readonly stmts: Statements;
  private readonly heads = new HeadCache();
  private readonly tail: PgTail;
  private readonly settings: AppendSettings;
  private readonly inFlight = new Set<Promise<unknown>>();
  private init: Promise<void> | undefined;
  private closed = false;
  private closing?: Promise<void>;
  /** The inbox and leases (work-store.ts, postgres/work.ts). */
  readonly work: PgWorkStore;
  /** The blobs (blob-store.ts, postgres/blobs.ts). */
  readonly blobs: PgBlobs;
  /** The live holder of each session (holders.ts, postgres/holders.ts). */
  readonly holders: PgHolders;

  constructor(private readonly options: Options) {
    this.ownPool = !('pool' in options);
    if ('pool' in options) this.pool = options.pool;
    this.conns = new Connections(() => this.pool!, options.durability === 'flushed');
    this.stmts = statements(options.schema);
    const channel = channelOf(options.schema);
    this.settings = {
      stmts: this.stmts,
      channel,
      conns: this.conns,
      begin:
        `BEGIN; SET LOCAL lock_timeout = ${options.lockTimeoutMs}; ` +
        `SET LOCAL idle_in_transaction_session_timeout = ${options.idleInTransactionTimeoutMs}`,
      lockTimeoutMs: options.lockTimeoutMs,
      ...(options.beforeCommit ? { beforeCommit: options.beforeCommit } : {}),
    };
    this.tail = new PgTail(
      async () => {
        await this.ready();
        const c = await this.conns.acquire();
        return { client: c.client, release: () => c.done(true) };
      },
      channel,
      options.pollIntervalMs,
    );
    this.work = new PgWorkStore(
      this.conns,
      () => this.ready(),
      () => this.assertOpen(),
      options.schema,
    );
    this.blobs = new PgBlobs(
      this.conns,
      () => this.ready(),
      () => this.assertOpen(),
      options.schema,
    );
    const lockConns = new Connections(() => this.lockPool!, false);
    this.holders = new PgHolders(
      this.conns,
      () => (this.lockPool ? lockConns : this.conns),
      () => this.ready(),
      () => this.assertOpen(),
      options.schema,
    );
  }

  ready(): Promise<void> {
    if (this.closed) return Promise.reject(new StoreClosedError(this.describe()));
    return (this.init ??= this.initOnce().catch((e) => {
      this.init = undefined; // a later call tries again (the server may be back)
      throw e;
    }));
  }

  private async initOnce(): Promise<void> {
    if (!this.pool) {
      const pg = await loadPg();
      const o = this.options as Extract<Options, { connectionString: string }>;
      const pool = new pg.Pool({
        connectionString: o.connectionString,
        max: o.maxConnections,
        keepAlive: true,
        connectionTimeoutMillis: o.connectionTimeoutMs,
      });
      pool.on('error', () => undefined); // an idle connection the server ended: the pool drops it
      this.pool = pool;
      const lockPool = new pg.Pool({
        connectionString: o.connectionString,
        max: 1,
        keepAlive: true,
        connectionTimeoutMillis: o.connectionTimeoutMs,
      });
      lockPool.on('error', () => undefined);
      this.lockPool = lockPool;
    }
    try {
      await this.conns.with(async () => undefined); // connects and checks synchronous_commit
      if (this.options.migrate) await migrate(this.pool, this.options.schema);
      else await checkSchema(this.pool, this.options.schema);
    } catch (e) {
      throw unavailable('setup', e, 'write');
    }
  }

  private describe(): string {
    return `PostgreSQL store (schema ${this.options.schema})`;
  }

  /** Runs one operation, counted so that close() waits for it. */
  private track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    void p.then(
      () => this.inFlight.delete(p),
      () => this.inFlight.delete(p),
    );
    return p;
  }

  async attachWriter(sessionId: string): Promise<AttachResult> {
    this.assertOpen();
    assertSessionId(sessionId, 'attachWriter');
    await this.ready();
    return this.track(
      (async () => {
        // retried on a dropped connection: a lost reply at worst bumps the epoch twice (still a fence)
        for (let tries = 0; ; tries++) {
          try {
            const head = await this.conns.with(async (c) => {
              try {
                await c.query(this.settings.begin); // inside: a failed SET still ends its transaction
                const r = await c.query({ ...this.stmts.attach, values: [sessionId] });
                await c.query('COMMIT');
                return headOf(sessionId, r.rows[0]);
              } catch (e) {
                await c.query('ROLLBACK').catch(() => undefined);
                throw e;
              }
            });
            this.heads.set(head);
            return { writerEpoch: head.writerEpoch, lastSeq: head.lastSeq, lastTurn: head.lastTurn };
          } catch (e) {
            const err = unavailable('attachWriter', e, 'write');
            if (tries >= 4 || !(err instanceof StoreUnavailableError) || err.sqlState === '55P03') throw err;
            await new Promise((r) => setTimeout(r, 50 * 2 ** tries));
          }
        }
      })(),
    );
  }

  async append(sessionId: string, writerEpoch: number, expectedSeq: number, drafts: readonly EventDraft[]): Promise<EventRecord[]> {
    this.assertOpen();
    assertAppendArgs(sessionId, writerEpoch, expectedSeq);
    const prepared = prepareDrafts(drafts, 'append', sessionId);
    await this.ready();
    const { records, written } = await this.track(appendTxn(this.settings, this.heads, sessionId, writerEpoch, expectedSeq, prepared));
    if (written) this.tail.wake(sessionId);
    return records;
  }

  async *readEvents(sessionId: string, range: ReadRange = {}): AsyncIterable<EventRecord> {
    this.assertOpen();
    const { fromSeq, toSeq } = readRange(sessionId, range);
    await this.ready();
    const page = this.options.readPageSize;
    const head = await this.getHead(sessionId);
    // Records up to the head's lastSeq must exist: a log shorter than its head is corrupt.
    const mustExist = Math.min(toSeq, head?.lastSeq ?? 0);
    let next = fromSeq;
    while (next <= toSeq) {
      const end = Math.min(toSeq, next + page - 1);
      const rows = await this.query((c) => c.query({ ...this.stmts.page, values: [sessionId, next, end, page] }), 'readEvents');
      const batch: EventRecord[] = [];
      for (const row of rows as { seq: string; record: string }[]) {
        const seq = Number(row.seq);
        if (seq !== next) throw new CorruptLogError(sessionId, next, `record missing (next stored seq is ${seq})`);
        batch.push(decodeRecord(sessionId, seq, row.record));
        next++;
      }
      if (next <= end && next <= mustExist) {
        throw new CorruptLogError(sessionId, next, `record missing (the head says the log ends at seq ${mustExist})`);
      }
      for (const e of batch) yield e;
      if (next <= end) return; // the log ends inside this page
      if (this.closed) throw new StoreClosedError(`${this.describe()} (closed while ${sessionId} was read; stopped before seq ${next})`);
    }
  }

  private async query(
    run: (c: Parameters<Parameters<Connections['with']>[0]>[0]) => Promise<{ rows: unknown[] }>,
    what: string,
  ): Promise<unknown[]> {
    try {
      return (await this.conns.with(run)).rows;
    } catch (e) {
      throw unavailable(what, e, 'read');
    }
  }

  async loadSurface(sessionId: string): Promise<EventRecord[]> {
    return surfaceOf(this, sessionId);
  }

  async getHead(sessionId: string): Promise<SessionHead | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getHead');
    await this.ready();
    const rows = await this.query((c) => c.query({ ...this.stmts.head, values: [sessionId] }), 'getHead');
    if (rows.length === 0) return undefined;
    const head = headOf(sessionId, rows[0]);
    this.heads.set(head);
    return head;
  }

  async getEventById(sessionId: string, eventId: string): Promise<EventRecord | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getEventById');
    assertEventId(eventId, 'getEventById');
    await this.ready();
    const rows = (await this.query((c) => c.query({ ...this.stmts.byId, values: [sessionId, eventId] }), 'getEventById')) as {
      seq: string;
      record: string;
    }[];
    // every id is indexed here: the generated form needs no second look-up
    return findEvent(
      eventId,
      () => (rows[0] ? Number(rows[0].seq) : undefined),
      (seq, indexed) => (indexed ? decodeRecord(sessionId, seq, rows[0]!.record) : undefined),
    );
  }

  async listSessions(): Promise<string[]> {
    this.assertOpen();
    await this.ready();
    const rows = await this.query((c) => c.query(this.stmts.sessions), 'listSessions');
    return (rows as { session_id: string }[]).map((r) => r.session_id);
  }

  events$(sessionId: string, options?: { fromSeq?: number }): Observable<EventRecord> {
    return this.tail.follow(sessionId, followFrom(sessionId, options), (r) => this.readEvents(sessionId, r));
  }

  /** Waits for the operations in flight, then ends every connection the store opened (LISTEN included). */
  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    this.tail.close();
    this.work.close();
    this.holders.close();
    await this.init?.catch(() => undefined);
    if (this.ownPool && this.pool) await this.pool.end();
    await this.lockPool?.end();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreClosedError(this.describe());
  }
}
