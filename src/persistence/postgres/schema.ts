import { createHash } from 'node:crypto';
import { z } from 'zod';
import { StoreUnavailableError } from '../../contracts/errors.js';
import type { PgPool, PgPoolClient } from './pg-types.js';

/** The PostgreSQL schema holding actorloop's tables (created by the migrations). */
export const SchemaName = z
  .string()
  .min(1)
  // PostgreSQL cuts an identifier at 63 bytes: two longer names would share one schema
  .refine((s) => Buffer.byteLength(s, 'utf8') <= 63, 'must be at most 63 bytes in UTF-8 (PostgreSQL cuts longer identifiers)')
  .refine((s) => !s.includes('\u0000'), 'must not contain NUL')
  .default('actorloop');

/** A quoted SQL identifier (the schema name comes from the user's options). */
export const ident = (name: string): string => `"${name.replace(/"/g, '""')}"`;

/** A string literal for a simple query (one that takes no parameters): `E'…'` with `'` and `\` doubled. */
export const literal = (text: string): string => `E'${text.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

/**
 * The statement that sends the wake-up `payload` on `channel`, run in a transaction of its own:
 * never inside one that writes. PostgreSQL serialises the commits of the transactions that
 * notified (a database-wide lock taken before the commit record and held until the commit is
 * flushed), so a NOTIFY inside an append would make every append of the database wait for the WAL
 * flush of the one before it: no group commit (`npm run bench -- pg-notify`). A transaction that
 * only notifies writes nothing that must be flushed, so it holds that lock for microseconds.
 */
export const notifyQuery = (channel: string, payload: string): string => `SELECT pg_notify(${literal(channel)}, ${literal(payload)})`;

/**
 * A NOTIFY channel named `prefix:schema` (channels are per database, so it names the schema). A
 * channel is an identifier of at most 63 bytes: past that, `prefix#` and a hash of the schema
 * name stand for it, the same in every process.
 */
export function channelName(prefix: string, schema: string): string {
  const plain = `${prefix}:${schema}`;
  if (Buffer.byteLength(plain, 'utf8') <= 63) return plain;
  return `${prefix}#${createHash('sha256').update(schema, 'utf8').digest('hex').slice(0, 32)}`;
}

/** The NOTIFY channel of a schema's appends. */
export const channelOf = (schema: string): string => channelName('actorloop', schema);

/**
 * Versioned migrations, applied in order; `SCHEMA_VERSION_PG` is the newest this build knows.
 * `{s}` stands for the quoted schema name. Never edit a released migration: add the next one.
 */
const MIGRATIONS: readonly string[] = [
  // 1: the log, the per-session head row, the event-id index
  `CREATE TABLE {s}.sessions (
     session_id        text   PRIMARY KEY,
     writer_epoch      bigint NOT NULL,
     head_seq          bigint NOT NULL,
     last_turn         bigint NOT NULL,
     surface_start_seq bigint NOT NULL,
     state_context_seq bigint NOT NULL,
     open_run          jsonb,
     last_settled_run  jsonb,
     pending_inputs    jsonb  NOT NULL,
     held_locks        jsonb  NOT NULL
   );
   CREATE TABLE {s}.events (
     session_id text   NOT NULL,
     seq        bigint NOT NULL,
     event_id   text   NOT NULL,
     type       text   NOT NULL,
     record     text   NOT NULL,
     PRIMARY KEY (session_id, seq)
   );
   CREATE UNIQUE INDEX events_event_id ON {s}.events (session_id, event_id);`,
  // 2: the inbox, the sessions' work rows (inbox counters, leases bound to the writer epoch), the workers
  `CREATE TABLE {s}.inbox (
     session_id    text        NOT NULL,
     entry_id      text        NOT NULL,
     seq           bigint      NOT NULL,
     kind          text        NOT NULL,
     entry         text        NOT NULL,
     submitted_at  timestamptz NOT NULL DEFAULT now(),
     applied_epoch bigint,
     applied_at    timestamptz,
     outcome       text,
     PRIMARY KEY (session_id, entry_id)
   );
   CREATE INDEX inbox_pending ON {s}.inbox (session_id, seq) WHERE applied_at IS NULL;
   CREATE TABLE {s}.session_work (
     session_id   text        PRIMARY KEY,
     inbox_seq    bigint      NOT NULL DEFAULT 0,
     applied_seq  bigint      NOT NULL DEFAULT 0,
     pending      int         NOT NULL DEFAULT 0,
     worker_id    text,
     writer_epoch bigint,
     lease_until  timestamptz,
     resume       boolean     NOT NULL DEFAULT false
   );
   CREATE INDEX session_work_ready ON {s}.session_work (session_id) WHERE pending > 0 OR resume OR worker_id IS NOT NULL;
   CREATE TABLE {s}.workers (
     worker_id    text        PRIMARY KEY,
     host         text        NOT NULL,
     pid          int         NOT NULL,
     concurrency  int         NOT NULL,
     started_at   timestamptz NOT NULL,
     heartbeat_at timestamptz NOT NULL,
     ttl_ms       int         NOT NULL
   );`,
  // 3: the blobs (blob-store.ts): the bytes of content parts, one row per SHA-256, never deleted
  `CREATE TABLE {s}.blobs (
     sha256     text        PRIMARY KEY,
     size       bigint      NOT NULL,
     bytes      bytea       NOT NULL,
     created_at timestamptz NOT NULL DEFAULT now()
   );`,
  // 4: the live holder of each session (postgres/holders.ts): its process, and the advisory lock its store holds while it lives
  `CREATE TABLE {s}.session_holders (
     session_id text        PRIMARY KEY,
     host       text        NOT NULL,
     pid        int         NOT NULL,
     start_time text,
     worker_id  text,
     lock_class bigint      NOT NULL,
     lock_obj   bigint      NOT NULL,
     since      timestamptz NOT NULL DEFAULT now()
   );`,
  // 5: the token buckets of rate limits shared by a pool's processes (postgres/rate.ts): level and pause in ms of the database's clock
  `CREATE TABLE {s}.rate_buckets (
     key          text   PRIMARY KEY,
     level        float8 NOT NULL,
     at_ms        float8 NOT NULL,
     paused_until float8 NOT NULL DEFAULT 0
   );`,
];

export const SCHEMA_VERSION_PG = MIGRATIONS.length;

const versionTable = (s: string) => `${ident(s)}.actorloop_schema`;

/** The schema's version (0: not created yet). */
export async function versionOf(c: PgPoolClient, schema: string): Promise<number> {
  const exists = await c.query({ text: `SELECT to_regclass($1) IS NOT NULL AS ok`, values: [versionTable(schema)] });
  if (!(exists.rows[0] as { ok: boolean }).ok) return 0;
  const r = await c.query(`SELECT max(version) AS v FROM ${versionTable(schema)}`);
  return Number((r.rows[0] as { v: unknown }).v ?? 0);
}

function refuseNewer(schema: string, version: number): void {
  if (version > SCHEMA_VERSION_PG) {
    throw new StoreUnavailableError(
      `PostgreSQL schema ${JSON.stringify(schema)} is at version ${version}, which this version of actorloop does not know ` +
        `(it knows versions up to ${SCHEMA_VERSION_PG}): upgrade actorloop to use this database`,
      'not_written',
    );
  }
}

/**
 * Brings `schema` to the newest version, in one transaction under an advisory lock (concurrent
 * first uses wait for each other; the second finds the work done). Returns the version.
 */
export async function migrate(pool: PgPool, schema: string): Promise<{ from: number; to: number }> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query({ text: `SELECT pg_advisory_xact_lock(hashtext($1))`, values: [`actorloop-migrate:${schema}`] });
    const from = await versionOf(c, schema);
    refuseNewer(schema, from);
    if (from < SCHEMA_VERSION_PG) {
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${ident(schema)}`);
      await c.query(
        `CREATE TABLE IF NOT EXISTS ${versionTable(schema)} (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      for (let v = from + 1; v <= SCHEMA_VERSION_PG; v++) {
        await c.query(MIGRATIONS[v - 1]!.replaceAll('{s}', ident(schema)));
        await c.query({ text: `INSERT INTO ${versionTable(schema)} (version) VALUES ($1)`, values: [v] });
      }
    }
    await c.query('COMMIT');
    return { from, to: Math.max(from, SCHEMA_VERSION_PG) };
  } catch (e) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

/** For `migrate: false`: the schema must already be at this build's version. */
export async function checkSchema(pool: PgPool, schema: string): Promise<void> {
  const c = await pool.connect();
  try {
    const v = await versionOf(c, schema);
    refuseNewer(schema, v);
    if (v < SCHEMA_VERSION_PG) {
      throw new StoreUnavailableError(
        `PostgreSQL schema ${JSON.stringify(schema)} is at version ${v}, this version of actorloop needs ${SCHEMA_VERSION_PG}: ` +
          `run \`actorloop migrate --postgres <url>\` (or open the store with migrate: true)`,
        'not_written',
      );
    }
  } finally {
    c.release();
  }
}
