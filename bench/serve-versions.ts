/**
 * The serve bench's old-against-new rows (`npm run bench -- serve`, after bench/serve.ts's table):
 * today's `runtime.serve` (the worker machine) and the serve before it (bench/serve-old.ts, read
 * from git at bench time), interleaved in one run so that both see the same machine: rounds
 * alternate new-old, old-new, … on a fresh store each time — LMDB served in this process
 * (`BENCH_SERVE_ROUNDS`, 8 of each), then one PostgreSQL worker process (`BENCH_SERVE_PG_ROUNDS`,
 * 8 of each — 3 could not tell 10 % from the drift between rounds; skipped without a server). Same workload as bench/serve.ts (its `BENCH_SERVE_SESSIONS`
 * sessions, 4 steps each, 5 ms model latency, 32 at once); each implementation is warmed up with
 * `BENCH_SERVE_WARM` sessions in this process before the first round. Prints every round, the
 * medians and new/old: steps/s (depends on the load, which both share) and CPU ms per step — as the
 * ratio of the medians, and as the median of each round's ratio (its two runs back to back).
 */
import { loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { ServeOptions } from '../src/contracts/inbox.js';
import type { EventStore } from '../src/persistence/event-store.js';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { createRuntime } from '../src/runtime/runtime.js';
import type { ServeHandle } from '../src/runtime/serve.js';
import { serveAgent, serveUntilSettled } from '../test/crash/serve-child.js';
import { loadOldServe, materializeOldServe, OLD_SERVE_COMMIT, oldServeDir, serveOld, type OldServe } from './serve-old.js';
import { pgCase, SERVE_OPTIONS, SESSIONS, STEPS_PER_RUN, submitAll, WARM } from './serve.js';
import { fmt, median, printTable } from './table.js';

const ROUNDS = Number(process.env.BENCH_SERVE_ROUNDS ?? 8);
const PG_ROUNDS = Number(process.env.BENCH_SERVE_PG_ROUNDS ?? 8);

const HEADER = ['case', 'serve', 'steps/s, each round', 'steps/s (median)', 'worker CPU ms/step (median)'];

type Impl = 'new' | 'old';
interface Round {
  impl: Impl;
  stepsPerS: number;
  cpuMsPerStep: number;
}

const load = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');

/** One LMDB round: a fresh store, every session's input waiting, served in this process until every session was released. */
async function lmdbRound(impl: Impl, oldServe: OldServe, tag: string): Promise<Round> {
  const tmp = process.env.ACTORLOOP_BENCH_TMP ?? '.tmp';
  const store = lmdbStore({ path: join(tmp, `serve-versions-${process.pid}-${tag}`) });
  const runtime = createRuntime({ store, ...serveAgent({ steps: 3, latencyMs: 5, toolMs: 0 }) });
  await submitAll(store, 's');
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const handle = serveWith(impl, oldServe, runtime, store)(SERVE_OPTIONS);
  await new Promise<void>((resolve) => {
    let released = 0;
    handle.subscribe((e) => {
      if (e.type === 'released' && ++released >= SESSIONS) resolve();
    });
  });
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  let steps = 0;
  for (let i = 0; i < SESSIONS; i++) for await (const e of store.readEvents(`s${i}`)) if (e.type === 'step/start') steps++;
  await handle.stop();
  await runtime.close();
  if (steps !== SESSIONS * STEPS_PER_RUN)
    console.log(`note: ${impl} logged ${steps} step/start events, expected ${SESSIONS * STEPS_PER_RUN}`);
  return { impl, stepsPerS: (steps / ms) * 1000, cpuMsPerStep: (cpu.user + cpu.system) / 1000 / steps };
}

const serveWith =
  (impl: Impl, oldServe: OldServe, runtime: ReturnType<typeof createRuntime>, store: EventStore) =>
  (o: ServeOptions): ServeHandle =>
    impl === 'new' ? runtime.serve(o) : serveOld(oldServe, runtime, store, o);

/** new, old, then old, new, …: each implementation goes first as often as the other. */
const order = (round: number): Impl[] => (round % 2 === 0 ? ['new', 'old'] : ['old', 'new']);

function summarize(label: string, rounds: Round[], rows: (string | number)[][]): void {
  const of = (impl: Impl) => rounds.filter((r) => r.impl === impl);
  const med = (impl: Impl, f: (r: Round) => number) => median(of(impl).map(f));
  for (const impl of ['new', 'old'] as const)
    rows.push([
      label,
      impl === 'new' ? 'worker machine (today)' : `before it (${OLD_SERVE_COMMIT})`,
      of(impl)
        .map((r) => fmt(r.stepsPerS, 0))
        .join(', '),
      fmt(
        med(impl, (r) => r.stepsPerS),
        0,
      ),
      fmt(
        med(impl, (r) => r.cpuMsPerStep),
        2,
      ),
    ]);
  rows.push([
    label,
    'new / old',
    '',
    `${fmt(med('new', (r) => r.stepsPerS) / med('old', (r) => r.stepsPerS), 2)}×`,
    `${fmt(med('new', (r) => r.cpuMsPerStep) / med('old', (r) => r.cpuMsPerStep), 2)}×`,
  ]);
  const steps = roundByRound(of('new'), of('old'), (r) => r.stepsPerS);
  const cpu = roundByRound(of('new'), of('old'), (r) => r.cpuMsPerStep);
  rows.push([
    label,
    'new / old, round by round',
    steps.map((x) => `${fmt(x, 2)}×`).join(', '),
    `${fmt(median(steps), 2)}×`,
    `${fmt(median(cpu), 2)}×`,
  ]);
}

/**
 * new/old of each round (the two ran back to back, so a change of the machine's load between
 * rounds touches both): their median drifts less with the load than the ratio of the medians.
 */
function roundByRound(news: Round[], olds: Round[], f: (r: Round) => number): number[] {
  return news.slice(0, olds.length).map((r, i) => f(r) / f(olds[i]!));
}

export async function benchServeVersions(): Promise<void> {
  let oldServe: OldServe;
  let oldFile: string;
  try {
    oldFile = materializeOldServe(oldServeDir());
    oldServe = await loadOldServe(oldFile);
  } catch (e) {
    console.log(`old-against-new rows skipped: the serve of ${OLD_SERVE_COMMIT} could not be read from git (${(e as Error).message})`);
    return;
  }
  console.log(`load average at start: ${load()}`);
  const rows: (string | number)[][] = [];
  // warm-up: both implementations, in this process, before the first timed round
  const tmp = process.env.ACTORLOOP_BENCH_TMP ?? '.tmp';
  for (const impl of ['new', 'old'] as const) {
    const store = lmdbStore({ path: join(tmp, `serve-versions-warm-${process.pid}-${impl}`) });
    const runtime = createRuntime({ store, ...serveAgent({ steps: 3, latencyMs: 5, toolMs: 0 }) });
    await serveUntilSettled(runtime, 'w', WARM, SERVE_OPTIONS, serveWith(impl, oldServe, runtime, store));
  }
  const lmdb: Round[] = [];
  for (let r = 0; r < ROUNDS; r++) for (const impl of order(r)) lmdb.push(await lmdbRound(impl, oldServe, `${r}-${impl}`));
  summarize('lmdbStore, serve in one process', lmdb, rows);
  console.log(`load average after the LMDB rounds: ${load()}`);
  printTable(HEADER, rows); // (in case the PostgreSQL rounds fail)

  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `actorloop_serve_versions_${process.pid}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  let pgReady = PG_ROUNDS > 0;
  if (pgReady)
    try {
      await admin.connect();
      await admin.query(`CREATE DATABASE ${name}`);
    } catch (e) {
      console.log(`PostgreSQL rows skipped: no server at ${baseUrl} (${(e as Error).message})`);
      await admin.end().catch(() => undefined);
      pgReady = false;
    }
  if (pgReady) {
    const u = new URL(baseUrl);
    u.pathname = `/${name}`;
    const pgRounds: Round[] = [];
    try {
      for (let r = 0; r < PG_ROUNDS; r++)
        for (const impl of order(r)) {
          const c = await pgCase(u.toString(), 1, { tag: `${impl}${r}`, flags: impl === 'old' ? [`--old-serve=${oldFile}`] : [] });
          pgRounds.push({ impl, stepsPerS: (c.steps / c.ms) * 1000, cpuMsPerStep: c.workerCpuMs / c.steps });
        }
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
    summarize('postgresStore, 1 worker process', pgRounds, rows);
  }
  console.log(`load average at end: ${load()}`);
  console.log(
    `\nOld and new serve, interleaved (${SESSIONS} sessions a round, ${STEPS_PER_RUN} steps each; rounds alternate which goes first; CPU: the serving process's):\n`,
  );
  printTable(HEADER, rows);
}
