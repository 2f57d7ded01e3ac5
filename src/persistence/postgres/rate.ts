import { guardPool } from './connection.js';
import { z } from 'zod';
import type { SharedBucket, SharedBuckets } from '../../contracts/rate-limits.js';
import { parseInput } from '../../contracts/validate.js';
import type { PgPool } from './pg-types.js';
import { checkSchema, ident, migrate, SchemaName } from './schema.js';

const NOW = `(extract(epoch FROM clock_timestamp()) * 1000)`;

const isPool = (v: unknown): v is PgPool =>
  typeof v === 'object' && v !== null && typeof (v as PgPool).connect === 'function' && typeof (v as PgPool).end === 'function';

/**
 * The options of `postgresRateBuckets`: the app's pool, and the schema and migration settings of
 * the store on the same database (`postgresStore`'s, with the same defaults).
 * @example
 * postgresRateBuckets({ pool, schema: 'agents', migrate: false })
 */
export const PostgresRateBucketsOptions = z.strictObject({
  pool: z.custom<PgPool>(isPool, 'a pg.Pool (or an object with connect() and end())'),
  /** The schema whose `rate_buckets` table (migration 5) holds the buckets. */
  schema: SchemaName,
  /** Apply the package's migrations on first use (under an advisory lock); false: only check the version. */
  migrate: z.boolean().default(true),
});
export type PostgresRateBucketsOptions = z.input<typeof PostgresRateBucketsOptions>;

/**
 * Token buckets shared by every process on one PostgreSQL database (docs/rate-limits.md): one row
 * a bucket in `<schema>.rate_buckets` (migration 5, applied as a store's first use or `actorloop
 * migrate` applies them), refilled by the database's clock. A take is one statement (the rows
 * locked in key order, refilled, checked and taken together); a settlement another.
 * @example
 * createRuntime({ store, rateLimits: [{ provider: 'openai', inputTokensPerMinute: 30_000 }],
 * rateLimitBuckets: postgresRateBuckets({ pool }) })
 */
export function postgresRateBuckets(options: PostgresRateBucketsOptions): SharedBuckets {
  const o = parseInput(PostgresRateBucketsOptions, options, 'postgresRateBuckets');
  const table = `${ident(o.schema)}.rate_buckets`;
  const run = async (text: string, values: unknown[]) => {
    guardPool(o.pool);
    const c = await o.pool.connect();
    try {
      return await c.query({ text, values });
    } finally {
      c.release();
    }
  };
  const sorted = <T extends { key: string }>(xs: readonly T[]) => [...xs].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return {
    async ensure(buckets: readonly SharedBucket[]) {
      if (o.migrate) await migrate(o.pool, o.schema);
      else await checkSchema(o.pool, o.schema);
      const b = sorted(buckets);
      await run(
        `INSERT INTO ${table} (key, level, at_ms)
         SELECT k, c, ${NOW} FROM unnest($1::text[], $2::float8[]) AS w(k, c) ON CONFLICT (key) DO NOTHING`,
        [b.map((x) => x.key), b.map((x) => x.capacity)],
      );
    },
    async take(takes) {
      const t = sorted(takes);
      // the clock is read before the rows are locked: a take that waited for another's lock reads a
      // time before the one that other wrote, so a bucket's time only moves forward (else the wait's
      // refill would be counted twice)
      const r = await run(
        `WITH want AS (SELECT * FROM unnest($1::text[], $2::float8[], $3::float8[], $4::float8[]) AS w(key, need, cap, per_ms)),
        cur AS (
          SELECT b.key, w.need, LEAST(w.need, w.cap) AS want, w.per_ms, b.paused_until, n.ms,
                 LEAST(w.cap, b.level + GREATEST(0, n.ms - b.at_ms) * w.per_ms) AS lvl
          FROM ${table} b JOIN want w ON w.key = b.key CROSS JOIN (SELECT ${NOW} AS ms) n
          ORDER BY b.key FOR UPDATE OF b),
        verdict AS (
          SELECT COALESCE(MAX(GREATEST(paused_until - ms, CASE WHEN lvl + 1e-6 >= want THEN 0 ELSE (want - lvl) / per_ms END)), 0) AS wait,
                 count(*) AS n FROM cur),
        upd AS (
          UPDATE ${table} b SET level = cur.lvl - CASE WHEN verdict.wait <= 0 THEN cur.need ELSE 0 END, at_ms = GREATEST(b.at_ms, cur.ms)
          FROM cur, verdict WHERE b.key = cur.key RETURNING 1)
        SELECT wait, n, (SELECT count(*) FROM upd) AS updated FROM verdict`,
        [t.map((x) => x.key), t.map((x) => x.need), t.map((x) => x.capacity), t.map((x) => x.perMs)],
      );
      const row = r.rows[0] as { wait: number; n: string };
      if (Number(row.n) !== t.length) throw new Error(`rate buckets missing in ${table} (${row.n} of ${t.length})`);
      return Math.max(0, Number(row.wait));
    },
    async settle(changes, pauseMs) {
      const c = sorted(changes);
      // refilled (to the capacity at most) before the delta: usage above the reservation is taken even from a bucket refilled
      // to full; then no more than what the provider says is left
      await run(
        `UPDATE ${table} b
         SET level = LEAST(w.cap, LEAST(w.cap, b.level + GREATEST(0, ${NOW} - b.at_ms) * w.per_ms) + w.delta, w.at_most),
             at_ms = GREATEST(b.at_ms, ${NOW}),
             paused_until = GREATEST(b.paused_until, ${NOW} + $5::float8)
         FROM unnest($1::text[], $2::float8[], $3::float8[], $4::float8[], $6::float8[]) AS w(key, delta, cap, per_ms, at_most)
         WHERE b.key = w.key`,
        [
          c.map((x) => x.key),
          c.map((x) => x.delta),
          c.map((x) => x.capacity),
          c.map((x) => x.perMs),
          pauseMs,
          c.map((x) => x.atMost ?? null), // LEAST ignores a NULL: no cap
        ],
      );
    },
  };
}
