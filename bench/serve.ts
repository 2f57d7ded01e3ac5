/**
 * The serve benchmark (`npm run bench -- serve`): steps/s of `runtime.serve` with 1, 2 and 4
 * worker processes on one PostgreSQL, against LMDB served in one process, in the same run.
 * Every session gets one input (submitted by this process through `runtime.submit` once the
 * workers are up); its run makes 3 tool steps of 2 calls (`lookup` parallel, `charge` exclusive)
 * and a final answer — 4 steps — with a 5 ms scripted model latency per call. The clock runs from
 * the workers' start until every run has settled; before it, every serving process has served
 * `BENCH_SERVE_WARM` sessions (300) of a store of its own (JIT warm-up). Needs a server
 * (ACTORLOOP_TEST_POSTGRES, else 127.0.0.1:5432) for the PostgreSQL rows. `BENCH_SERVE_SESSIONS`
 * sets the size (1,200), `BENCH_SERVE_WORKERS` the worker counts (1,2,4), `BENCH_SERVE_VERBOSE`
 * prints each worker's counters and the server's wait events.
 */
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createRuntime } from '../src/runtime/runtime.js';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { postgresStore } from '../src/persistence/postgres/postgres-store.js';
import type { EventStore } from '../src/persistence/event-store.js';
import { REPO_ROOT, spawnTs, type ChildRun } from '../test/crash/child-util.js';
import { serveAgent, serveUntilSettled } from '../test/crash/serve-child.js';
import { fmt, printTable } from './table.js';
import { machineCpuMs, serverProbe, type ServerProbe } from './serve-server.js';
import type { WorkerProbe } from './serve-probe.js';

export const SESSIONS = Number(process.env.BENCH_SERVE_SESSIONS ?? 1200);
/** Sessions each serving process runs (on a store of its own) before the clock starts: JIT warm-up. */
export const WARM = Number(process.env.BENCH_SERVE_WARM ?? 300);
export const STEPS_PER_RUN = 4; // 3 tool steps + the final answer
const CONCURRENCY = 32;
const CHILD = join(REPO_ROOT, 'test/crash/serve-child.ts');
/** `BENCH_SERVE_COMMIT_DELAY_US`: PostgreSQL's commit_delay for the bench's database (0: the disk as it is). */
const COMMIT_DELAY_US = Number(process.env.BENCH_SERVE_COMMIT_DELAY_US ?? 0);
export const SERVE_OPTIONS = { concurrency: CONCURRENCY, leaseMs: 15_000, pollMs: 200 };
const VERBOSE = Boolean(process.env.BENCH_SERVE_VERBOSE);
/** Worker processes of the PostgreSQL rows (`BENCH_SERVE_WORKERS=1,2,4`). */
const WORKERS = (process.env.BENCH_SERVE_WORKERS ?? '1,2,4').split(',').map(Number);
const WORKER_FLAGS = [
  '--wait-go',
  `--concurrency=${CONCURRENCY}`,
  '--latency=5',
  '--tool-ms=0',
  '--steps=3',
  '--lease-ms=15000',
  '--poll-ms=200',
  `--warm=${WARM}`,
];

export async function submitAll(store: EventStore, prefix: string): Promise<void> {
  const feeder = createRuntime({ store, ...serveAgent({ steps: 3, latencyMs: 0, toolMs: 0 }) });
  const ids = Array.from({ length: SESSIONS }, (_, i) => `${prefix}${i}`);
  for (let i = 0; i < ids.length; i += 50) {
    await Promise.all(
      ids.slice(i, i + 50).map((sid) => feeder.submit(sid, { kind: 'input', inputId: `${sid}-in`, mode: 'follow_up', message: sid })),
    );
  }
}

export interface CaseResult {
  ms: number;
  steps: number;
  /** CPU ms of the serving process(es) (the bench process itself for LMDB). */
  workerCpuMs: number;
  workers?: WorkerProbe[];
  server?: ServerProbe;
  machineCpuMs?: number;
  /** The server's WAL flushes (pg_stat_wal, every database) and their time in ms, over the workers' lifetime. */
  wal?: { syncs: number; syncMs: number };
}

/**
 * pg_stat_wal's WAL flushes and their time, as counted so far (a backend reports its counts at the
 * latest when it exits; the time only where track_wal_io_timing is on: the bench's database).
 */
async function walStats(c: pg.Client): Promise<{ syncs: number; syncMs: number }> {
  const r = (await c.query(`SELECT wal_sync, wal_sync_time FROM pg_stat_wal`)).rows[0];
  return { syncs: Number(r.wal_sync), syncMs: Number(r.wal_sync_time) };
}

/** `o.flags`: more worker flags (bench/serve-versions.ts: `--old-serve=<file>`); `o.tag`: names the case's schema apart. */
export async function pgCase(url: string, workers: number, o: { flags?: string[]; tag?: string } = {}): Promise<CaseResult> {
  const schema = `serve_bench_${process.pid}_${workers}${o.tag ? `_${o.tag}` : ''}`;
  const store = postgresStore({ connectionString: url, schema, maxConnections: 4 });
  await store.ready();
  const spec = `pg:${url}#${schema}`;
  const children: ChildRun[] = Array.from({ length: workers }, (_, i) =>
    spawnTs(CHILD, ['worker', spec, ...WORKER_FLAGS, ...(o.flags ?? []), '--probe'], { label: `bench worker ${i + 1}` }),
  );
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const watcher = new pg.Client({ connectionString: url });
  await watcher.connect();
  try {
    await Promise.all(children.map((c) => c.waitFor((l) => l === 'READY', 120_000, 'READY')));
    await submitAll(store, 's'); // (not timed: every session has its input waiting when the workers start)
    await store.close(); // (its backends exit, flushing their statistics before the counts start)
    const db = new URL(url).pathname.slice(1);
    await new Promise((r) => setTimeout(r, 200));
    const wal0 = await walStats(admin);
    const server = serverProbe(watcher, db, { waits: VERBOSE });
    await server.start();
    const t0 = performance.now();
    for (const c of children) c.send('GO');
    const q = `SELECT count(*)::int AS n FROM "${schema}".sessions WHERE open_run IS NULL AND last_settled_run IS NOT NULL`;
    for (;;) {
      const n = (await admin.query(q)).rows[0].n as number;
      if (n >= SESSIONS) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const ms = performance.now() - t0;
    const serverStats = await server.stop();
    const probes = await Promise.all(
      children.map(async (c) => {
        c.send('PROBE');
        const line = await c.waitFor((l) => l.startsWith('PROBE '), 30_000, 'PROBE');
        return JSON.parse(line.slice('PROBE '.length)) as WorkerProbe;
      }),
    );
    const steps = (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".events WHERE type = 'step/start'`)).rows[0].n as number;
    if (VERBOSE)
      for (const c of children)
        for (const l of c.lines.filter((x) => x.startsWith('EV lease_lost') || x.startsWith('EV error')).slice(0, 3)) console.log(l);
    for (const c of children) c.signal('SIGTERM');
    await Promise.all(children.map((c) => c.waitExit(60_000).catch(() => undefined)));
    await new Promise((r) => setTimeout(r, 500)); // (the exited backends' statistics)
    const wal1 = await walStats(admin);
    return {
      ms,
      steps,
      workerCpuMs: probes.reduce((a, p) => a + p.cpuUserMs + p.cpuSystemMs, 0),
      workers: probes,
      server: serverStats,
      machineCpuMs: serverStats.machineCpuMs,
      wal: { syncs: wal1.syncs - wal0.syncs, syncMs: wal1.syncMs - wal0.syncMs },
    };
  } finally {
    for (const c of children) c.signal('SIGTERM');
    await Promise.all(children.map((c) => c.waitExit(60_000).catch(() => undefined)));
    await admin.end();
    await watcher.end();
    await store.close();
  }
}

async function lmdbCase(): Promise<CaseResult> {
  const tmp = process.env.ACTORLOOP_BENCH_TMP ?? '.tmp';
  const store = lmdbStore({ path: join(tmp, `serve-bench-lmdb-${process.pid}`) });
  const agent = () => serveAgent({ steps: 3, latencyMs: 5, toolMs: 0 });
  await serveUntilSettled(
    createRuntime({ store: lmdbStore({ path: join(tmp, `serve-bench-lmdb-warm-${process.pid}`) }), ...agent() }),
    'w',
    WARM,
    SERVE_OPTIONS,
  );
  const runtime = createRuntime({ store, ...agent() });
  await submitAll(store, 's');
  const m0 = machineCpuMs();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const handle = runtime.serve(SERVE_OPTIONS);
  let released = 0;
  let done!: () => void;
  const all = new Promise<void>((r) => (done = r));
  handle.subscribe((e) => {
    if (e.type === 'released' && ++released >= SESSIONS) done();
  });
  await all;
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const machine = machineCpuMs() - m0;
  let steps = 0;
  for (let i = 0; i < SESSIONS; i++) for await (const e of store.readEvents(`s${i}`)) if (e.type === 'step/start') steps++;
  await handle.stop();
  await runtime.close();
  return { ms, steps, workerCpuMs: (cpu.user + cpu.system) / 1000, machineCpuMs: machine };
}

export async function benchServe(): Promise<void> {
  const rows: (string | number)[][] = [];
  const costs: (string | number)[][] = [];
  const pgRows: (string | number)[][] = [];
  const row = (label: string, procs: number, r: CaseResult) => {
    if (r.steps !== SESSIONS * STEPS_PER_RUN)
      console.log(`note: ${label} logged ${r.steps} step/start events, expected ${SESSIONS * STEPS_PER_RUN}`);
    rows.push([
      label,
      procs,
      procs * CONCURRENCY,
      SESSIONS,
      r.steps,
      fmt(r.ms / 1000, 2),
      fmt((r.steps / r.ms) * 1000, 0),
      fmt((SESSIONS / r.ms) * 1000, 1),
    ]);
    costs.push(costRow(label, r));
    if (r.workers) pgRows.push(pgRow(label, r));
    if (VERBOSE && r.workers) printProbes(label, r);
  };
  const load = () =>
    loadavg()
      .map((x) => x.toFixed(1))
      .join(' ');
  console.log(`load average at start: ${load()}`);
  row('lmdbStore, serve in one process', 1, await lmdbCase());
  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `actorloop_serve_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  const header = ['case', 'processes', 'concurrency', 'sessions', 'steps', 'seconds', 'steps/s', 'runs/s'];
  const costHeader = [
    'case',
    'worker CPU ms/step',
    'PG backends CPU ms/step',
    'PG WAL/aux CPU ms/step',
    'machine CPU busy',
    'other processes CPU ms/step',
  ];
  const pgHeader = [
    'case',
    'slots held',
    'claims (empty)',
    'statements/step',
    'write transactions/step',
    'WAL flushes/step',
    'ms per WAL flush',
    'flushing (share of the run)',
  ];
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.query(`ALTER DATABASE ${name} SET track_wal_io_timing = on`); // (the WAL flush times of its backends)
    // a slower WAL device (network storage, a synchronous standby): every flush of this database waits this long first
    if (COMMIT_DELAY_US > 0)
      await admin.query(`ALTER DATABASE ${name} SET commit_delay = ${COMMIT_DELAY_US}; ALTER DATABASE ${name} SET commit_siblings = 0`);
  } catch (e) {
    console.log(`PostgreSQL rows skipped: no server at ${baseUrl} (${(e as Error).message}); set ACTORLOOP_TEST_POSTGRES=postgres://…`);
    await admin.end().catch(() => undefined);
    printTable(header, rows);
    return;
  }
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  try {
    for (const workers of WORKERS)
      row(`postgresStore, ${workers} worker process${workers > 1 ? 'es' : ''}`, workers, await pgCase(u.toString(), workers));
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
  console.log(`load average at end: ${load()}`);
  console.log(
    `${SESSIONS} sessions, one run each: ${STEPS_PER_RUN} steps (3 × 2 tool calls + the answer), 5 ms model latency per call; ${CONCURRENCY} sessions at once per process; each process warmed up with ${WARM} sessions${COMMIT_DELAY_US ? `; PostgreSQL commit_delay ${COMMIT_DELAY_US} µs` : ''}\n`,
  );
  printTable(header, rows);
  console.log(
    `\nWhere the CPU goes (${cpus().length} cores; CPU times do not depend on the machine's load, "machine CPU busy" and "other processes" say what else ran):\n`,
  );
  printTable(costHeader, costs);
  console.log(`\nPostgreSQL per step (counts; a WAL flush's time depends on the disk and on what else flushes):\n`);
  printTable(pgHeader, pgRows);
}

function costRow(label: string, r: CaseResult): (string | number)[] {
  const per = (ms: number | undefined) => (ms === undefined ? '—' : fmt(ms / r.steps, 2));
  const s = r.server;
  const known = r.workerCpuMs + (s ? s.backendCpuMs + s.auxCpuMs : 0);
  const busy = r.machineCpuMs === undefined ? '—' : `${fmt((100 * r.machineCpuMs) / (r.ms * cpus().length), 0)} %`;
  return [
    label,
    per(r.workerCpuMs),
    per(s?.backendCpuMs),
    per(s?.auxCpuMs),
    busy,
    r.machineCpuMs === undefined ? '—' : per(r.machineCpuMs - known),
  ];
}

function pgRow(label: string, r: CaseResult): (string | number)[] {
  const w = r.workers ?? [];
  const sum = (f: (p: WorkerProbe) => number) => w.reduce((a, p) => a + f(p), 0);
  const statements = sum((p) => Object.values(p.statements).reduce((x, [n]) => x + n, 0));
  // transactions that write (a COMMIT, or one statement that writes): each needs its WAL flushed
  const writes = sum((p) =>
    Object.entries(p.statements).reduce((x, [k, [n]]) => x + (/^(COMMIT|UPDATE|INSERT|WITH|attach)/.test(k) ? n : 0), 0),
  );
  const wal = r.wal;
  return [
    label,
    `${fmt(
      sum((p) => p.meanHeld),
      1,
    )} of ${sum((p) => p.concurrency)}`,
    `${sum((p) => p.claims)} (${sum((p) => p.claimsEmpty)})`,
    fmt(statements / r.steps, 1),
    fmt(writes / r.steps, 2),
    wal ? fmt(wal.syncs / r.steps, 2) : '—',
    wal && wal.syncs ? fmt(wal.syncMs / wal.syncs, 2) : '—',
    wal ? `${fmt((100 * wal.syncMs) / r.ms, 0)} %` : '—',
  ];
}

function printProbes(label: string, r: CaseResult): void {
  console.log(`\n${label}:`);
  for (const p of r.workers ?? []) {
    const top = Object.entries(p.statements).sort((a, b) => b[1][0] - a[1][0]);
    console.log(
      `  worker ${p.pid}: cpu ${fmt(p.cpuUserMs + p.cpuSystemMs, 0)} ms (system ${fmt(p.cpuSystemMs, 0)}), context switches ${p.voluntarySwitches} + ${p.involuntarySwitches} preempted, loop delay mean ${fmt(p.loopDelayMeanMs, 1)} p99 ${fmt(p.loopDelayP99Ms, 1)} ms, held ${fmt(p.meanHeld, 1)}/${p.concurrency}, hold ${fmt(p.meanHoldMs, 0)} ms, claims ${p.claims} (${p.claimsEmpty} empty)`,
    );
    console.log(`    events ${JSON.stringify(p.events)} appends refused ${JSON.stringify(p.appendsRefused)}`);
    console.log(`    statements ${top.map(([k, [n, t]]) => `${k} ×${n} ${fmt(t / n, 1)}ms`).join(', ')}`);
  }
  const s = r.server;
  if (s && s.samples) {
    const waits = Object.entries(s.waits).sort((a, b) => b[1] - a[1]);
    console.log(
      `  backends ${s.backends}, ${s.samples} samples: ${waits.map(([k, n]) => `${k} ${fmt(n / s.samples, 2)}`).join(', ')}; samples with an ungranted lock ${s.lockWaitSamples} (max ${s.maxUngranted})`,
    );
  }
}
