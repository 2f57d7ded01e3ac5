/**
 * `npm run bench -- ratelimit`: 100 sessions against a local provider that enforces an
 * input-tokens-per-window limit (bench/ratelimit-server.ts, the window scaled down to 2 s), with
 * the runtime's `rateLimits` limiter and without it (docs/rate-limits.md). Each row: the 429s
 * (all, and after the first window), the runs that failed, and the input tokens the provider
 * accepted after the first window as a % of its limit.
 */
import OpenAI from 'openai';
import { createRuntime, memoryStore, openaiModel } from '../src/index.js';
import { startRateServer } from './ratelimit-server.js';
import { fmt, printTable } from './table.js';

const SESSIONS = 100;
const RUNS = 2; // per session, one after the other (the second's context holds the first)
const WINDOW_MS = 2_000;
const LIMIT = 6_000; // input tokens a window
const PROMPT_CHARS = 800;

async function row(limited: boolean): Promise<(string | number)[]> {
  const server = await startRateServer({ tokensPerWindow: LIMIT, windowMs: WINDOW_MS });
  const client = new OpenAI({ apiKey: 'bench', baseURL: server.baseURL, maxRetries: 0 });
  const runtime = createRuntime({
    store: memoryStore(),
    model: openaiModel({ client, model: 'bench' }),
    config: { maxProviderAttempts: 30, maxRetryDelayMs: 10_000 },
    ...(limited ? { rateLimits: [{ provider: 'openai', inputTokensPerMinute: LIMIT, windowMs: WINDOW_MS }] } : {}),
  });
  const t0 = performance.now();
  let failed = 0;
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, i) => {
      const s = await runtime.openSession(`s${i}`);
      for (let r = 0; r < RUNS; r++) {
        const message = `session ${i} run ${r} `.padEnd(PROMPT_CHARS, 'x');
        const res = await s.execute({ kind: 'prompt', runId: `r${r}`, attemptId: `a${r}`, message });
        if (res.status !== 'succeeded') failed++;
      }
    }),
  );
  const wall = performance.now() - t0;
  await runtime.close();
  await server.close();
  const after = server.startedAt + WINDOW_MS;
  const late = server.accepted.filter((a) => a.at >= after);
  const last = Math.max(...server.accepted.map((a) => a.at));
  const tokens = late.reduce((n, a) => n + a.tokens, 0);
  const capacity = ((last - after) / WINDOW_MS) * LIMIT;
  return [
    limited ? 'with rateLimits' : 'without',
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
  const rows = [await row(true), await row(false)];
  printTable(
    ['limiter', 'runs', '429s', '429s after 1st window', 'failed runs', 'throughput after 1st window (% of limit)', 'wall (s)'],
    rows,
    ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
}
