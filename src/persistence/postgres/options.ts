import { z } from 'zod';
import type { PgPool } from './pg-types.js';
import { SchemaName } from './schema.js';

const isPool = (v: unknown): v is PgPool =>
  typeof v === 'object' && v !== null && typeof (v as PgPool).connect === 'function' && typeof (v as PgPool).end === 'function';

/** The largest timeout PostgreSQL takes, in ms (a 32-bit int). */
const MAX_PG_MS = 2_147_483_647;

/** A takeover waits for a paused writer's transaction to be aborted: the lock wait must outlast the idle timeout. */
const lockOutlastsIdle = (o: { lockTimeoutMs: number; idleInTransactionTimeoutMs: number }) =>
  o.lockTimeoutMs > o.idleInTransactionTimeoutMs;
const LOCK_OUTLASTS_IDLE = {
  message: "must be longer than idleInTransactionTimeoutMs: a takeover waits for a paused writer's transaction to be aborted",
  path: ['lockTimeoutMs'],
};

/** The settings both forms of `postgresStore` options take. */
export const Common = {
  /** The PostgreSQL schema holding actorloop's tables (created by the migrations). */
  schema: SchemaName,
  /** Apply the package's migrations on first use (under an advisory lock); false: only check the version. */
  migrate: z.boolean().default(true),
  /**
   * `flushed` (default): the server's `synchronous_commit` must be `on` or `remote_apply` (checked
   * on every new connection), so an append resolves only after its commit is flushed.
   * `committed`: any setting is accepted (with `off`, a crash of the server can lose acknowledged appends).
   */
  durability: z.enum(['flushed', 'committed']).default('flushed'),
  /** The server aborts an append transaction left idle this long (a paused or partitioned writer), freeing its session row. */
  idleInTransactionTimeoutMs: z
    .number()
    .int()
    .positive()
    .max(MAX_PG_MS, `must be at most ${MAX_PG_MS} ms (PostgreSQL's limit)`)
    .default(5000),
  /** An append or attach waiting this long for a session row fails (StoreUnavailableError); longer than the idle timeout. */
  lockTimeoutMs: z.number().int().positive().max(MAX_PG_MS, `must be at most ${MAX_PG_MS} ms (PostgreSQL's limit)`).default(15_000),
  /** Events per page when reading. */
  readPageSize: z.number().int().positive().default(512),
  /** events$ re-reads at least this often even without a notification. */
  pollIntervalMs: z.number().int().positive().default(2000),
  /**
   * Fault-injection hook for tests. Contract: called inside each append transaction after its
   * writes, before COMMIT; the append waits for what it returns; a throw aborts the append.
   */
  beforeCommit: z.custom<(sessionId: string) => unknown>((v) => typeof v === 'function').optional(),
};

/**
 * The options of `postgresStore`: `{ pool }` (the app's pg.Pool) or `{ connectionString }`, plus
 * the settings in `Common` above.
 * @example
 * postgresStore({ connectionString: 'postgres://app@db:5432/app', schema: 'agents', migrate: false })
 */
export const PostgresStoreOptions = z.union([
  z
    .strictObject({
      pool: z.custom<PgPool>(
        isPool,
        "a pg.Pool (or an object with connect() and end()); or give connectionString instead, for a pool of the store's own",
      ),
      ...Common,
    })
    .refine(lockOutlastsIdle, LOCK_OUTLASTS_IDLE),
  z
    .strictObject({
      connectionString: z.string().min(1),
      /**
       * Connections in the store's own pool. A serving worker holds two of them for good (LISTEN for
       * events$ followers, LISTEN for inbox wake-ups) and needs at least one more for everything else.
       */
      maxConnections: z
        .number()
        .int()
        .min(
          3,
          'must be at least 3: a serving worker holds one connection LISTENing for events$ followers ' +
            'and one for inbox wake-ups, and needs one more for reads and appends',
        )
        .default(10),
      /**
       * How long an operation waits for a connection of the store's own pool (a free one, or a new
       * one to open) before failing with StoreUnavailableError (outcome `not_written`).
       */
      connectionTimeoutMs: z.number().int().positive().max(MAX_PG_MS).default(10_000),
      ...Common,
    })
    .refine(lockOutlastsIdle, LOCK_OUTLASTS_IDLE),
]);
export type PostgresStoreOptions = z.input<typeof PostgresStoreOptions>;
export type Options = z.output<typeof PostgresStoreOptions>;
