import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, postgresRateBuckets, type ModelProvider, type Runtime } from '../../src/index.js';
import { ProviderError } from '../../src/contracts/errors.js';
import { SCHEMA_VERSION_PG } from '../../src/persistence/postgres/schema.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';

const db = await postgresForTests('rate limits shared on PostgreSQL');
const prompt = (runId: string) => ({ kind: 'prompt' as const, runId, attemptId: `${runId}-a`, message: 'go' });

/** Polls `done` (real time) until it holds: the test's outcome is checked after, not timed. */
async function until(done: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await done()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`never: ${what}`);
}

if (db) {
  const pools: pg.Pool[] = [];
  /** A pool of the file's database, ended after its tests. */
  const newPool = (max: number) => {
    const pool = new pg.Pool({ connectionString: db.url, max });
    pool.on('error', () => undefined); // the database dropped under an idle connection
    pools.push(pool);
    return pool;
  };
  const runtimes: Runtime[] = [];
  afterAll(async () => {
    for (const r of runtimes) await r.close();
    for (const p of pools) await p.end();
  });

  /** A "process": its own pool and runtime, the buckets in the file's database. */
  function worker(model: ModelProvider, limit: object, buckets: { schema?: string; migrate?: boolean } = {}): Runtime {
    const pool = newPool(2);
    const runtime = createRuntime({
      store: memoryStore(),
      model,
      rateLimits: [{ provider: 'p', ...limit }],
      rateLimitBuckets: postgresRateBuckets({ pool, ...buckets }),
    });
    runtimes.push(runtime);
    return runtime;
  }
  const counting = (count: { n: number }, first?: () => never): ModelProvider => ({
    modelId: 'm',
    providerName: 'p',
    call: async () => {
      if (++count.n === 1 && first) first();
      return { message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' };
    },
  });

  const query = async (text: string) => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      return await c.query(text);
    } finally {
      await c.end();
    }
  };

  describe('rate limits shared on PostgreSQL', () => {
    it("keeps the buckets in the store's schema, made by its migration 5 (never outside the migrations)", async () => {
      const schema = freshSchema('rate');
      const calls = { n: 0 };
      const runtime = worker(counting(calls), { requestsPerMinute: 5 }, { schema });
      const s = await runtime.openSession('in-schema');
      expect(await s.execute(prompt('r1'))).toMatchObject({ status: 'succeeded' });
      const versions = await query(`SELECT version FROM "${schema}".actorloop_schema ORDER BY version`);
      expect(versions.rows.map((r) => r.version)).toEqual(Array.from({ length: SCHEMA_VERSION_PG }, (_, i) => i + 1));
      const { rows } = await query(`SELECT key, level FROM "${schema}".rate_buckets`);
      expect(rows).toHaveLength(1);
      expect(rows[0].key).toMatch(/^p\/\* requestsPerMinute 5\//);
      expect(Number(rows[0].level)).toBeGreaterThan(3.9);
      expect(Number(rows[0].level)).toBeLessThan(4.5);
      // nothing made outside the schema
      const stray = await query(
        `SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE '%rate_buckets' AND schemaname <> '${schema}' AND schemaname <> 'actorloop'`,
      );
      expect(stray.rows[0].n).toBe(0);
    });

    it('takes usage above the reservation even from a bucket that refilled to full meanwhile', async () => {
      const pool = newPool(1);
      const buckets = postgresRateBuckets({ pool, schema: freshSchema('settle') });
      // 1000 a second: full again 100 ms after a take of 100
      const bucket = { key: 'settle input', capacity: 1000, perMs: 1 };
      await buckets.ensure([bucket]);
      expect(await buckets.take([{ ...bucket, need: 100 }])).toBe(0);
      await new Promise((r) => setTimeout(r, 200));
      await buckets.settle([{ ...bucket, delta: -300 }], 0); // the call used 300 more than it reserved
      // right after: 700 held (refilled to 1000, less 300); the 300 more take 300 ms to refill
      expect(await buckets.take([{ ...bucket, need: 1000 }])).toBeGreaterThan(150);
    });

    it('lowers a shared bucket to what the provider says is left, never raises it', async () => {
      const buckets = postgresRateBuckets({ pool: newPool(1), schema: freshSchema('lower') });
      const bucket = { key: 'lower input', capacity: 1000, perMs: 0.001 }; // 1000 a 1 000 000 ms: no refill to speak of
      await buckets.ensure([bucket]);
      expect(await buckets.take([{ ...bucket, need: 10 }])).toBe(0);
      await buckets.settle([{ ...bucket, delta: 0, atMost: 5_000 }], 0); // more than it holds: unchanged
      expect(await buckets.take([{ ...bucket, need: 990 }])).toBe(0);
      await buckets.settle([{ ...bucket, delta: 500, atMost: 20 }], 0); // 500 given back, then the provider's 20
      expect(await buckets.take([{ ...bucket, need: 20 }])).toBe(0);
      expect(await buckets.take([{ ...bucket, need: 1 }])).toBeGreaterThan(0);
    });

    it("never moves a bucket's refill time back: a take that waited for another's row lock refills from where that one left it", async () => {
      const schema = freshSchema('clock');
      const pool = newPool(1);
      const buckets = postgresRateBuckets({ pool, schema });
      const bucket = { key: 'clock input', capacity: 1000, perMs: 1 };
      await buckets.ensure([bucket]);
      // another process's take holds the row: it read the clock, waits, then writes its level and time
      const other = new pg.Client({ connectionString: db.url });
      await other.connect();
      try {
        await other.query('BEGIN');
        await other.query(`SELECT 1 FROM "${schema}".rate_buckets WHERE key = 'clock input' FOR UPDATE`);
        const taking = buckets.take([{ ...bucket, need: 10 }]); // reads the clock, then waits for the row
        await new Promise((r) => setTimeout(r, 300));
        await other.query(
          `UPDATE "${schema}".rate_buckets SET level = 0, at_ms = extract(epoch FROM clock_timestamp()) * 1000 WHERE key = 'clock input'`,
        );
        const { rows } = await other.query(`SELECT at_ms FROM "${schema}".rate_buckets WHERE key = 'clock input'`);
        await other.query('COMMIT');
        expect(await taking).toBeGreaterThan(0); // the bucket is empty: it waits
        const after = await query(`SELECT level, at_ms FROM "${schema}".rate_buckets WHERE key = 'clock input'`);
        // the refill since the other's write is not counted twice: the time stays where the other left it (or later)
        expect(Number(after.rows[0].at_ms)).toBeGreaterThanOrEqual(Number(rows[0].at_ms));
      } finally {
        await other.end();
      }
    });

    it('with migrate: false, refuses a schema that is not migrated: the call fails naming `actorloop migrate`', async () => {
      const schema = freshSchema('unmigrated');
      const runtime = worker(counting({ n: 0 }), { requestsPerMinute: 5 }, { schema, migrate: false });
      const s = await runtime.openSession('unmigrated');
      const result = await s.execute(prompt('r1'));
      expect(result.status).toBe('failed');
      expect(JSON.stringify(result)).toContain('actorloop migrate');
      const made = await query(`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = '${schema}'`);
      expect(made.rows[0].n).toBe(0);
    });

    it('a shared token limit keeps 1% back (a call granted in one process may reach the provider before one granted earlier in another); a request limit counts whole', async () => {
      // a window of 10 minutes: the buckets refill by under 2 tokens while the test runs
      const limit = { model: 'headroom', inputTokensPerMinute: 1_000, requestsPerMinute: 10, windowMs: 600_000 };
      const model: ModelProvider = {
        modelId: 'headroom',
        providerName: 'p',
        call: async () => ({
          message: { role: 'assistant', content: 'ok' },
          finishReason: 'stop',
          usage: { inputTokens: 100, outputTokens: 1 },
        }),
      };
      const s = await worker(model, limit).openSession('headroom-s');
      expect(await s.execute(prompt('r1'))).toMatchObject({ status: 'succeeded' });
      const read = async () => (await query(`SELECT key, level FROM actorloop.rate_buckets WHERE key LIKE 'p/headroom %'`)).rows;
      let rows = await read();
      const level = (kind: string) => Number(rows.find((r) => String(r.key).includes(kind))?.level);
      // the call's settlement (its reported usage for the estimate it took) is written after the
      // call ends, not awaited by the run: wait for it to land
      await until(async () => (rows = await read()).length > 0 && level('inputTokensPerMinute') < 950, 'the settlement');
      // 990 of 1,000 input tokens, less the call's 100
      expect(level('inputTokensPerMinute')).toBeGreaterThan(889);
      expect(level('inputTokensPerMinute')).toBeLessThan(893);
      // 10 requests, less the call
      expect(level('requestsPerMinute')).toBeGreaterThan(8.99);
      expect(level('requestsPerMinute')).toBeLessThan(9.1);
    });

    it("two runtimes on one database share a limit's bucket: 4 requests a window between them, the others wait", async () => {
      const calls = [{ n: 0 }, { n: 0 }];
      // a window of 10 minutes: the bucket refills by under 0.1 request while the test runs
      const limit = { requestsPerMinute: 4, windowMs: 600_000 };
      const workers = [worker(counting(calls[0]!), limit), worker(counting(calls[1]!), limit)];
      let waiting = 0;
      const sessions = [];
      for (const [w, runtime] of workers.entries()) {
        for (let i = 0; i < 6; i++) {
          const s = await runtime.openSession(`w${w}-s${i}`);
          // waiting now: told it waits, not granted yet
          s.events$.subscribe((e) => e.event.type === 'rate_limit_wait' && (waiting += e.event.state === 'waiting' ? 1 : -1));
          sessions.push({ s, running: s.execute(prompt('r1')) });
        }
      }
      // (not `calls + waiting === 12`: a session granted after waiting is no longer counted waiting a moment before its call is made)
      await until(() => calls[0]!.n + calls[1]!.n === 4 && waiting === 8, 'four calls made, every other one waiting').catch((e) => {
        throw new Error(`${(e as Error).message}: ${calls[0]!.n} + ${calls[1]!.n} calls, ${waiting} waiting`);
      });
      expect(calls[0]!.n + calls[1]!.n).toBe(4);
      const { rows } = await query(`SELECT level FROM actorloop.rate_buckets WHERE key LIKE 'p/* requestsPerMinute%'`);
      expect(rows).toHaveLength(1);
      expect(Number(rows[0].level)).toBeLessThan(0.5);
      for (const { s } of sessions) await s.requestCancel();
      const results = await Promise.all(sessions.map((x) => x.running));
      expect(results.filter((r) => r.status === 'succeeded')).toHaveLength(4);
      expect(results.filter((r) => r.status === 'cancelled')).toHaveLength(8);
    });

    it("a 429's retry-after in one runtime pauses the other runtime's calls of the provider", async () => {
      const a = { n: 0 };
      const b = { n: 0 };
      const limit = { requestsPerMinute: 1000, windowMs: 60_000 };
      const refuse = (): never => {
        throw new ProviderError('429', { retryable: false, code: 'rate_limit', status: 429, retryAfterMs: 120_000 });
      };
      const [wa, wb] = [worker(counting(a, refuse), limit), worker(counting(b), limit)];
      const sa = await wa.openSession('pa');
      expect(await sa.execute(prompt('r1'))).toMatchObject({ status: 'failed' });
      const sb = await wb.openSession('pb');
      let waited = '';
      sb.events$.subscribe((e) => e.event.type === 'rate_limit_wait' && (waited = e.event.limit));
      const running = sb.execute(prompt('r1'));
      await until(() => waited !== '', 'the other runtime waits');
      expect(waited).toBe('p/* (shared)');
      expect(b.n).toBe(0);
      await sb.requestCancel();
      expect(await running).toMatchObject({ status: 'cancelled' });
    });
  });
}
