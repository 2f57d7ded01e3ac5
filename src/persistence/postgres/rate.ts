import type { SharedBucket, SharedBuckets } from '../../contracts/rate-limits.js';
import type { PgPool } from './pg-types.js';

const NOW = `(extract(epoch FROM clock_timestamp()) * 1000)`;

/**
 * Token buckets shared by every process on one PostgreSQL database (docs/rate-limits.md): one row
 * a bucket in `actorloop_rate_buckets` (made on first use), refilled by the database's clock.
 * A take is one statement (the rows locked in key order, refilled, checked and taken together); a
 * settlement another.
 * @example
 * createRuntime({ store, rateLimits: [{ provider: 'openai', inputTokensPerMinute: 30_000 }],
 * rateLimitBuckets: postgresRateBuckets({ pool }) })
 */
export function postgresRateBuckets(o: { pool: PgPool }): SharedBuckets {
  const run = async (text: string, values: unknown[]) => {
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
      await run(
        `CREATE TABLE IF NOT EXISTS actorloop_rate_buckets (key text PRIMARY KEY, level float8 NOT NULL, at_ms float8 NOT NULL, paused_until float8 NOT NULL DEFAULT 0)`,
        [],
      ).catch(async (e: unknown) => {
        // two processes creating it at once: one of them loses the race on the catalog
        if ((e as { code?: string }).code !== '23505' && (e as { code?: string }).code !== '42P07') throw e;
      });
      const b = sorted(buckets);
      await run(
        `INSERT INTO actorloop_rate_buckets (key, level, at_ms) SELECT k, c, ${NOW} FROM unnest($1::text[], $2::float8[]) AS w(k, c) ON CONFLICT (key) DO NOTHING`,
        [b.map((x) => x.key), b.map((x) => x.capacity)],
      );
    },
    async take(takes) {
      const t = sorted(takes);
      const r = await run(
        `WITH want AS (SELECT * FROM unnest($1::text[], $2::float8[], $3::float8[], $4::float8[]) AS w(key, need, cap, per_ms)),
        cur AS (
          SELECT b.key, w.need, LEAST(w.need, w.cap) AS want, w.per_ms, b.paused_until, n.ms,
                 LEAST(w.cap, b.level + GREATEST(0, n.ms - b.at_ms) * w.per_ms) AS lvl
          FROM actorloop_rate_buckets b JOIN want w ON w.key = b.key CROSS JOIN (SELECT ${NOW} AS ms) n
          ORDER BY b.key FOR UPDATE OF b),
        verdict AS (
          SELECT COALESCE(MAX(GREATEST(paused_until - ms, CASE WHEN lvl + 1e-6 >= want THEN 0 ELSE (want - lvl) / per_ms END)), 0) AS wait,
                 count(*) AS n FROM cur),
        upd AS (
          UPDATE actorloop_rate_buckets b SET level = cur.lvl - CASE WHEN verdict.wait <= 0 THEN cur.need ELSE 0 END, at_ms = cur.ms
          FROM cur, verdict WHERE b.key = cur.key RETURNING 1)
        SELECT wait, n, (SELECT count(*) FROM upd) AS updated FROM verdict`,
        [t.map((x) => x.key), t.map((x) => x.need), t.map((x) => x.capacity), t.map((x) => x.perMs)],
      );
      const row = r.rows[0] as { wait: number; n: string };
      if (Number(row.n) !== t.length) throw new Error(`rate buckets missing in actorloop_rate_buckets (${row.n} of ${t.length})`);
      return Math.max(0, Number(row.wait));
    },
    async settle(changes, pauseMs) {
      const c = sorted(changes);
      await run(
        `UPDATE actorloop_rate_buckets b
         SET level = LEAST(w.cap, b.level + GREATEST(0, ${NOW} - b.at_ms) * w.per_ms + w.delta), at_ms = ${NOW},
             paused_until = GREATEST(b.paused_until, ${NOW} + $5::float8)
         FROM unnest($1::text[], $2::float8[], $3::float8[], $4::float8[]) AS w(key, delta, cap, per_ms) WHERE b.key = w.key`,
        [c.map((x) => x.key), c.map((x) => x.delta), c.map((x) => x.capacity), c.map((x) => x.perMs), pauseMs],
      );
    },
  };
}
