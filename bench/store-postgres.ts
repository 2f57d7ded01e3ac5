/**
 * PostgreSQL event-store benchmark, against LMDB in the same run: appends/s and µs per append for
 * one session appending in a loop and for 100 sessions appending at once, 1 event per append.
 * Run with `npm run bench -- store` (needs a server: ACTORLOOP_TEST_POSTGRES, else 127.0.0.1:5432).
 *
 * Group commit on PostgreSQL can be had two ways; both are measured:
 * - `postgresStore` as shipped: each append is its own transaction, concurrent on the pool; the
 *   server's WAL writer flushes the commits that wait together in one fsync;
 * - `one txn per drain` (bench-only): appends queued while a commit is in flight go out in one
 *   transaction, one fenced statement per append, one COMMIT for all.
 */
import { join } from 'node:path';
import pg from 'pg';
import type { EventDraft } from '../src/contracts/events.js';
import { applyAppend } from '../src/persistence/append-core.js';
import { prepareDrafts } from '../src/persistence/codec.js';
import type { EventStore } from '../src/persistence/event-store.js';
import type { SessionHead } from '../src/persistence/head.js';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { postgresStore } from '../src/persistence/postgres/postgres-store.js';
import { appendValues, headOf, SnapshotTxn, statements } from '../src/persistence/postgres/rows.js';
import { channelOf, migrate, notifyQuery } from '../src/persistence/postgres/schema.js';
import { userMsg } from '../test/helpers/drafts.js';
import { median, percentile, printTable } from './table.js';

const SEQ_N = 400;
const SESSIONS = 100;
const PER_SESSION = 20;
const CONTENT = 'Please summarise the attached report and list the open questions, one per line.';
const oneEvent = (i: number): EventDraft[] => [userMsg(`${CONTENT} #${i}`, 1, i + 1)];

interface Result {
  n: number;
  elapsedMs: number;
  samples: number[];
}

type Append = (sid: string, epoch: number, seq: number, drafts: EventDraft[]) => Promise<unknown>;
interface Target {
  attach(sid: string): Promise<{ writerEpoch: number }>;
  append: Append;
  close(): Promise<void>;
}

const fromStore = (store: EventStore): Target => ({
  attach: (sid) => store.attachWriter(sid),
  append: (sid, e, s, d) => store.append(sid, e, s, d),
  close: () => store.close(),
});

async function measure(target: Target, sessions: number, perSession: number): Promise<Result> {
  try {
    const ids = Array.from({ length: sessions }, (_, k) => `bench-${sessions}-${k}`);
    const epochs = (await Promise.all(ids.map((id) => target.attach(id)))).map((a) => a.writerEpoch);
    const next = ids.map(() => 1);
    const one = (k: number) => target.append(ids[k]!, epochs[k]!, next[k]++, oneEvent(next[k]!));
    for (let w = 0; w < 3; w++) await Promise.all(ids.map((_, k) => one(k))); // warm-up
    const samples: number[] = [];
    const start = performance.now();
    await Promise.all(
      ids.map(async (_, k) => {
        for (let j = 0; j < perSession; j++) {
          const t0 = performance.now();
          await one(k);
          samples.push((performance.now() - t0) * 1000);
        }
      }),
    );
    return { n: samples.length, elapsedMs: performance.now() - start, samples };
  } finally {
    await target.close();
  }
}

/**
 * Bench-only: the other group-commit design. Appends queue; whenever no commit is in flight, all
 * queued appends go out in one transaction (each its own fenced statement; a refused one would
 * need a savepoint — not measured here, none is refused) and resolve at its COMMIT.
 */
async function batchedTarget(url: string, schema: string): Promise<Target> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  await migrate(pool as never, schema);
  const stmts = statements(schema);
  const heads = new Map<string, SessionHead>();
  let queue: { sid: string; epoch: number; seq: number; drafts: EventDraft[]; done: (e?: unknown) => void }[] = [];
  let busy = false;
  const drain = async () => {
    busy = true;
    while (queue.length) {
      const ops = queue;
      queue = [];
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        for (const op of ops) {
          const txn = new SnapshotTxn(op.sid, heads.get(op.sid));
          const out = applyAppend(txn, op.sid, op.epoch, op.seq, prepareDrafts(op.drafts, 'bench', op.sid), new Date().toISOString());
          const before = heads.get(op.sid)!;
          await c.query({
            ...stmts.append,
            values: appendValues(
              before,
              out.head,
              op.epoch,
              txn.events.map((e) => e.record),
              txn.events.map((e) => e.text),
            ),
          });
          heads.set(op.sid, out.head);
        }
        await c.query(['COMMIT', ...ops.map((op) => notifyQuery(channelOf(schema), op.sid))].join('; '));
        for (const op of ops) op.done();
      } catch (e) {
        for (const op of ops) op.done(e);
      } finally {
        c.release();
      }
    }
    busy = false;
  };
  return {
    attach: async (sid) => {
      const r = await pool.query({ ...stmts.attach, values: [sid] });
      const h = headOf(sid, r.rows[0]);
      heads.set(sid, h);
      return h;
    },
    append: (sid, epoch, seq, drafts) =>
      new Promise<void>((res, rej) => {
        queue.push({ sid, epoch, seq, drafts, done: (e) => (e ? rej(e) : res()) });
        if (!busy) void drain();
      }),
    close: () => pool.end(),
  };
}

export async function createDatabase(baseUrl: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `actorloop_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: baseUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

export async function benchStorePostgres(): Promise<void> {
  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  let db;
  try {
    db = await createDatabase(baseUrl);
  } catch (e) {
    console.log(`skipped: no PostgreSQL at ${baseUrl} (${(e as Error).message}); set ACTORLOOP_TEST_POSTGRES=postgres://…`);
    return;
  }
  const tmp = process.env.ACTORLOOP_BENCH_TMP ?? '.tmp';
  const settings = new pg.Client({ connectionString: db.url });
  await settings.connect();
  const show = async (k: string) => (await settings.query(`SELECT current_setting('${k}') AS v`)).rows[0].v as string;
  const server = `${await show('server_version')}, synchronous_commit ${await show('synchronous_commit')}, fsync ${await show('fsync')}, wal_sync_method ${await show('wal_sync_method')}, commit_delay ${await show('commit_delay')}`;
  await settings.end();
  let n = 0;
  const cases: [string, number, number, () => Promise<Target>][] = [];
  for (const [sessions, per] of [
    [1, SEQ_N],
    [SESSIONS, PER_SESSION],
  ] as const) {
    cases.push([`lmdbStore 'flushed'`, sessions, per, async () => fromStore(lmdbStore({ path: join(tmp, `pg-bench-lmdb-${++n}`) }))]);
    cases.push([
      `postgresStore (pool of 10, a transaction per append)`,
      sessions,
      per,
      async () => fromStore(postgresStore({ connectionString: db.url, schema: `b${++n}` })),
    ]);
    cases.push([
      `postgresStore (pool of 30)`,
      sessions,
      per,
      async () => fromStore(postgresStore({ connectionString: db.url, schema: `b${++n}`, maxConnections: 30 })),
    ]);
    cases.push([`bench-only: one transaction per drain`, sessions, per, () => batchedTarget(db.url, `b${++n}`)]);
  }
  const rows = [];
  try {
    for (const [label, sessions, per, open] of cases) {
      const r = await measure(await open(), sessions, per);
      const perSec = (r.n / r.elapsedMs) * 1000;
      rows.push([label, sessions, r.n, perSec, (r.elapsedMs * 1000) / r.n, median(r.samples), percentile(r.samples, 99)]);
    }
  } finally {
    await db.drop();
  }
  console.log(`PostgreSQL ${server}\n`);
  printTable(
    ['case (1 event/append)', 'sessions', 'appends', 'appends/s', 'µs/append (wall)', 'p50 latency µs', 'p99 latency µs'],
    rows.map((r) => r.map((c) => (typeof c === 'number' ? Math.round(c) : c))),
  );
}
