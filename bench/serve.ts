/**
 * The serve benchmark (`npm run bench -- serve`): steps/s of `runtime.serve` with 1, 2 and 4
 * worker processes on one PostgreSQL, against LMDB served in one process, in the same run.
 * Every session gets one input (submitted by this process through `runtime.submit` once the
 * workers are up); its run makes 3 tool steps of 2 calls (`lookup` parallel, `charge` exclusive)
 * and a final answer — 4 steps — with a 5 ms scripted model latency per call. The clock runs from
 * the workers' start until every run has settled. Needs a server (ACTORLOOP_TEST_POSTGRES, else
 * 127.0.0.1:5432) for the PostgreSQL rows; `BENCH_SERVE_SESSIONS` sets the size.
 */
import { join } from 'node:path';
import pg from 'pg';
import { createRuntime } from '../src/runtime/runtime.js';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { postgresStore } from '../src/persistence/postgres/postgres-store.js';
import type { EventStore } from '../src/persistence/event-store.js';
import { REPO_ROOT, spawnTs, type ChildRun } from '../test/crash/child-util.js';
import { serveAgent } from '../test/crash/serve-child.js';
import { fmt, printTable } from './table.js';

const SESSIONS = Number(process.env.BENCH_SERVE_SESSIONS ?? 300);
const STEPS_PER_RUN = 4; // 3 tool steps + the final answer
const CONCURRENCY = 32;
const CHILD = join(REPO_ROOT, 'test/crash/serve-child.ts');
const WORKER_FLAGS = ['--wait-go', `--concurrency=${CONCURRENCY}`, '--latency=5', '--tool-ms=0', '--steps=3', '--lease-ms=15000', '--poll-ms=200'];

async function submitAll(store: EventStore, prefix: string): Promise<void> {
  const feeder = createRuntime({ store, ...serveAgent({ steps: 3, latencyMs: 0, toolMs: 0 }) });
  const ids = Array.from({ length: SESSIONS }, (_, i) => `${prefix}${i}`);
  for (let i = 0; i < ids.length; i += 50) {
    await Promise.all(ids.slice(i, i + 50).map((sid) => feeder.submit(sid, { kind: 'input', inputId: `${sid}-in`, mode: 'follow_up', message: sid })));
  }
}

export async function pgCase(url: string, workers: number): Promise<{ ms: number; steps: number }> {
  const schema = `serve_bench_${process.pid}_${workers}`;
  const store = postgresStore({ connectionString: url, schema, maxConnections: 4 });
  await store.ready();
  const spec = `pg:${url}#${schema}`;
  const children: ChildRun[] = Array.from({ length: workers }, (_, i) => spawnTs(CHILD, ['worker', spec, ...WORKER_FLAGS], { label: `bench worker ${i + 1}` }));
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await Promise.all(children.map((c) => c.waitFor((l) => l === 'READY', 120_000, 'READY')));
    await submitAll(store, 's'); // (not timed: every session has its input waiting when the workers start)
    const t0 = performance.now();
    for (const c of children) c.send('GO');
    const q = `SELECT count(*)::int AS n FROM "${schema}".sessions WHERE open_run IS NULL AND last_settled_run IS NOT NULL`;
    for (;;) {
      const n = (await admin.query(q)).rows[0].n as number;
      if (n >= SESSIONS) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const ms = performance.now() - t0;
    const steps = (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".events WHERE type = 'step/start'`)).rows[0].n as number;
    const tally = children.map((c) => ['claimed', 'lease_lost', 'fenced', 'error'].map((t) => `${t} ${c.lines.filter((l) => l.startsWith(`EV ${t} `)).length}`).join(', '));
    if (process.env.BENCH_SERVE_VERBOSE) {
      console.log(`${workers} workers: ${tally.join(' | ')}`);
      for (const c of children) for (const l of c.lines.filter((x) => x.startsWith('EV lease_lost') || x.startsWith('EV error')).slice(0, 3)) console.log(l);
    }
    return { ms, steps };
  } finally {
    for (const c of children) c.signal('SIGTERM');
    await Promise.all(children.map((c) => c.waitExit(60_000).catch(() => undefined)));
    await admin.end();
    await store.close();
  }
}

async function lmdbCase(): Promise<{ ms: number; steps: number }> {
  const tmp = process.env.ACTORLOOP_BENCH_TMP ?? '.tmp';
  const store = lmdbStore({ path: join(tmp, `serve-bench-lmdb-${process.pid}`) });
  const runtime = createRuntime({ store, ...serveAgent({ steps: 3, latencyMs: 5, toolMs: 0 }) });
  await submitAll(store, 's');
  const t0 = performance.now();
  const handle = runtime.serve({ concurrency: CONCURRENCY, leaseMs: 15_000, pollMs: 200 });
  let released = 0;
  let done!: () => void;
  const all = new Promise<void>((r) => (done = r));
  handle.subscribe((e) => {
    if (e.type === 'released' && ++released >= SESSIONS) done();
  });
  await all;
  const ms = performance.now() - t0;
  let steps = 0;
  for (let i = 0; i < SESSIONS; i++) for await (const e of store.readEvents(`s${i}`)) if (e.type === 'step/start') steps++;
  await handle.stop();
  await runtime.close();
  return { ms, steps };
}

export async function benchServe(): Promise<void> {
  const rows: (string | number)[][] = [];
  const row = (label: string, procs: number, r: { ms: number; steps: number }) => {
    if (r.steps !== SESSIONS * STEPS_PER_RUN) console.log(`note: ${label} logged ${r.steps} step/start events, expected ${SESSIONS * STEPS_PER_RUN}`);
    rows.push([label, procs, procs * CONCURRENCY, SESSIONS, r.steps, fmt(r.ms / 1000, 2), fmt((r.steps / r.ms) * 1000, 0), fmt((SESSIONS / r.ms) * 1000, 1)]);
  };
  row('lmdbStore, serve in one process', 1, await lmdbCase());
  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `actorloop_serve_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
  } catch (e) {
    console.log(`PostgreSQL rows skipped: no server at ${baseUrl} (${(e as Error).message}); set ACTORLOOP_TEST_POSTGRES=postgres://…`);
    await admin.end().catch(() => undefined);
    printTable(['case', 'processes', 'concurrency', 'sessions', 'steps', 'seconds', 'steps/s', 'runs/s'], rows);
    return;
  }
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  try {
    for (const workers of [1, 2, 4]) row(`postgresStore, ${workers} worker process${workers > 1 ? 'es' : ''}`, workers, await pgCase(u.toString(), workers));
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
  console.log(`${SESSIONS} sessions, one run each: ${STEPS_PER_RUN} steps (3 × 2 tool calls + the answer), 5 ms model latency per call; ${CONCURRENCY} sessions at once per process\n`);
  printTable(['case', 'processes', 'concurrency', 'sessions', 'steps', 'seconds', 'steps/s', 'runs/s'], rows);
}
