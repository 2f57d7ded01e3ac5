import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, postgresRateBuckets, type ModelProvider, type Runtime } from '../../src/index.js';
import { ProviderError } from '../../src/contracts/errors.js';
import { postgresForTests } from '../helpers/postgres.js';

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
  const runtimes: Runtime[] = [];
  afterAll(async () => {
    for (const r of runtimes) await r.close();
    for (const p of pools) await p.end();
  });

  /** A "process": its own pool and runtime, the buckets in the file's database. */
  function worker(model: ModelProvider, limit: object): Runtime {
    const pool = new pg.Pool({ connectionString: db!.url, max: 2 });
    pools.push(pool);
    const runtime = createRuntime({
      store: memoryStore(),
      model,
      rateLimits: [{ provider: 'p', ...limit }],
      rateLimitBuckets: postgresRateBuckets({ pool }),
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

  describe('rate limits shared on PostgreSQL', () => {
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
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      const { rows } = await c.query(`SELECT level FROM actorloop_rate_buckets WHERE key LIKE 'p/* requestsPerMinute%'`);
      await c.end();
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
