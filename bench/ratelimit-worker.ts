/**
 * One worker process of `npm run bench -- ratelimit`'s PostgreSQL row: its own runtime and pool,
 * the limit's buckets in the bench database. Args: baseURL pgURL from count runs promptChars limit windowMs.
 * Prints `{"failed":n}` when its sessions are done.
 */
import OpenAI from 'openai';
import pg from 'pg';
import { createRuntime, memoryStore, openaiModel, postgresRateBuckets } from '../src/index.js';
import { runSessions } from './ratelimit-server.js';

const [baseURL, pgUrl, from, count, runs, promptChars, limit, windowMs] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: pgUrl, max: 4 });
const runtime = createRuntime({
  store: memoryStore(),
  model: openaiModel({ client: new OpenAI({ apiKey: 'bench', baseURL, maxRetries: 0 }), model: 'bench' }),
  config: { maxProviderAttempts: 30, maxRetryDelayMs: 10_000 },
  rateLimits: [{ provider: 'openai', inputTokensPerMinute: Number(limit), windowMs: Number(windowMs) }],
  rateLimitBuckets: postgresRateBuckets({ pool }),
});
const failed = await runSessions(runtime, {
  from: Number(from),
  count: Number(count),
  runs: Number(runs),
  promptChars: Number(promptChars),
});
await runtime.close();
await pool.end();
console.log(JSON.stringify({ failed }));
