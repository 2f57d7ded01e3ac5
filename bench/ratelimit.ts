/**
 * `npm run bench -- ratelimit`: 100 sessions against a local provider that enforces an
 * input-tokens-per-window limit (bench/ratelimit-server.ts, the window scaled down to 2 s), with
 * the runtime's `rateLimits` limiter and without it (docs/rate-limits.md). Each row: the 429s
 * (all, and after the first window), the runs that failed, and the input tokens the provider
 * accepted after the first window as a % of its limit.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { createRuntime, memoryStore, openaiModel } from '../src/index.js';
import { runSessions, startRateServer, type RateServer } from './ratelimit-server.js';
import { createDatabase } from './store-postgres.js';
import { fmt, printTable } from './table.js';

const SESSIONS = 100;
const RUNS = 2; // per session, one after the other (the second's context holds the first)
const WINDOW_MS = 2_000;
const LIMIT = 6_000; // input tokens a window
const PROMPT_CHARS = 800;

const WORKLOAD = { runs: RUNS, promptChars: PROMPT_CHARS };

/** In this process: one runtime, with the limiter or without. */
async function inProcess(server: RateServer, limited: boolean): Promise<number> {
  const client = new OpenAI({ apiKey: 'bench', baseURL: server.baseURL, maxRetries: 0 });
  const runtime = createRuntime({
    store: memoryStore(),
    model: openaiModel({ client, model: 'bench' }),
    config: { maxProviderAttempts: 30, maxRetryDelayMs: 10_000 },
    ...(limited ? { rateLimits: [{ provider: 'openai', inputTokensPerMinute: LIMIT, windowMs: WINDOW_MS }] } : {}),
  });
  const failed = await runSessions(runtime, { from: 0, count: SESSIONS, ...WORKLOAD });
  await runtime.close();
  return failed;
}

/** Two worker processes, half the sessions each, the limit's buckets on PostgreSQL. */
async function twoWorkers(server: RateServer, pgUrl: string): Promise<number> {
  const worker = join(dirname(fileURLToPath(import.meta.url)), 'ratelimit-worker.ts');
  const half = SESSIONS / 2;
  const one = (from: number) =>
    new Promise<number>((resolve, reject) => {
      const args = [server.baseURL, pgUrl, from, half, RUNS, PROMPT_CHARS, LIMIT, WINDOW_MS].map(String);
      const p = spawn(process.execPath, ['--import', 'tsx', worker, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString()));
      p.on('exit', (code) =>
        code === 0
          ? resolve((JSON.parse(out.trim().split('\n').pop()!) as { failed: number }).failed)
          : reject(new Error(`worker exited ${code}`)),
      );
    });
  const failed = await Promise.all([one(0), one(half)]);
  return failed[0]! + failed[1]!;
}

const notes: string[] = [];

async function row(label: string, work: (server: RateServer) => Promise<number>): Promise<(string | number)[]> {
  const server = await startRateServer({ tokensPerWindow: LIMIT, windowMs: WINDOW_MS });
  const t0 = performance.now();
  const failed = await work(server);
  const wall = performance.now() - t0;
  await server.close();
  const after = (server.firstAt ?? 0) + WINDOW_MS;
  const late = server.accepted.filter((a) => a.at >= after);
  const lateShort = server.short.filter((_, i) => server.refused[i]! >= after);
  if (lateShort.length > 0 && lateShort.length <= 20)
    notes.push(
      `${label}: the 429s after the first window were short by ${lateShort.map((t) => `${Math.round(t)} tokens (${fmt(t / (LIMIT / WINDOW_MS), 0)} ms of refill)`).join(', ')}`,
    );
  const last = Math.max(...server.accepted.map((a) => a.at));
  const tokens = late.reduce((n, a) => n + a.tokens, 0);
  const capacity = ((last - after) / WINDOW_MS) * LIMIT;
  return [
    label,
    SESSIONS * RUNS,
    server.refused.length,
    server.refused.filter((t) => t >= after).length,
    failed,
    fmt((100 * tokens) / capacity, 1),
    fmt(wall / 1000, 1),
  ];
}

export async function benchRateLimit(): Promise<void> {
  console.log(
    `${SESSIONS} sessions × ${RUNS} runs, ~${PROMPT_CHARS / 4} input tokens a prompt; the provider allows ${LIMIT} input tokens a ${WINDOW_MS} ms window`,
  );
  const rows = [await row('with rateLimits', (s) => inProcess(s, true)), await row('without', (s) => inProcess(s, false))];
  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  const db = await createDatabase(baseUrl).catch((e: unknown) => {
    console.log(
      `the PostgreSQL row skipped: no PostgreSQL at ${baseUrl} (${(e as Error).message}); set ACTORLOOP_TEST_POSTGRES=postgres://…`,
    );
    return undefined;
  });
  if (db) {
    try {
      rows.push(await row('2 worker processes, buckets on PostgreSQL', (s) => twoWorkers(s, db.url)));
    } finally {
      await db.drop();
    }
  }
  printTable(
    ['limiter', 'runs', '429s', '429s after 1st window', 'failed runs', 'throughput after 1st window (% of limit)', 'wall (s)'],
    rows,
    ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  for (const n of notes.splice(0)) console.log(n);
}
