/**
 * Why the PostgreSQL store never sends a NOTIFY from a transaction that writes
 * (`npm run bench -- pg-notify`; docs/scale-out.md, "The append transaction"): 16 connections
 * commit one-row inserts for 3 s each way — without a NOTIFY, with one inside the transaction,
 * and with one after the COMMIT in the same message (what the store does) — and the server's WAL
 * flushes are counted (pg_stat_wal). PostgreSQL serialises the commits of notifying transactions
 * (a database-wide lock held until the commit is flushed), so with the NOTIFY inside, every
 * commit gets a flush of its own. Needs a server (ACTORLOOP_TEST_POSTGRES, else 127.0.0.1:5432).
 */
import pg from 'pg';
import { fmt, printTable } from './table.js';

const CONNECTIONS = 16;
const MS = 3000;
type Mode = 'none' | 'inside' | 'after';

async function round(url: string, mode: Mode): Promise<{ perSec: number; perFlush: number }> {
  const clients = await Promise.all(
    Array.from({ length: CONNECTIONS + 1 }, async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      return c;
    }),
  );
  const stats = clients[0]!;
  const syncs = async () => Number((await stats.query('SELECT wal_sync FROM pg_stat_wal')).rows[0].wal_sync);
  const s0 = await syncs();
  let n = 0;
  const end = performance.now() + MS;
  await Promise.all(
    clients.slice(1).map(async (c, i) => {
      while (performance.now() < end) {
        await c.query('BEGIN');
        if (mode === 'inside')
          await c.query(`WITH i AS (INSERT INTO t (v) VALUES ('x') RETURNING 1) SELECT pg_notify('bench', 's${i}') FROM i`);
        else await c.query(`INSERT INTO t (v) VALUES ('x')`);
        await c.query(mode === 'after' ? `COMMIT; SELECT pg_notify('bench', 's${i}')` : 'COMMIT');
        n++;
      }
    }),
  );
  await Promise.all(clients.slice(1).map((c) => c.end())); // (an exiting backend reports its WAL counts)
  await new Promise((r) => setTimeout(r, 300));
  const flushes = (await syncs()) - s0;
  await stats.end();
  return { perSec: (n / MS) * 1000, perFlush: n / Math.max(1, flushes) };
}

export async function benchPgNotify(): Promise<void> {
  const baseUrl = process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `actorloop_notify_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
  } catch (e) {
    console.log(`skipped: no PostgreSQL at ${baseUrl} (${(e as Error).message}); set ACTORLOOP_TEST_POSTGRES=postgres://…`);
    await admin.end().catch(() => undefined);
    return;
  }
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  const rows: (string | number)[][] = [];
  try {
    const setup = new pg.Client({ connectionString: u.toString() });
    await setup.connect();
    await setup.query('CREATE TABLE t (id bigserial PRIMARY KEY, v text)');
    await setup.end();
    const label: Record<Mode, string> = {
      none: 'no NOTIFY',
      inside: 'NOTIFY inside the transaction',
      after: 'COMMIT; NOTIFY (one message, two transactions)',
    };
    for (const r of [1, 2]) {
      for (const mode of ['none', 'inside', 'after'] as const) {
        const x = await round(u.toString(), mode);
        rows.push([`${label[mode]} (round ${r})`, fmt(x.perSec, 0), fmt(x.perFlush, 2)]);
      }
    }
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
  console.log(`${CONNECTIONS} connections committing one-row inserts, ${MS / 1000} s per row\n`);
  printTable(['case', 'commits/s', 'commits per WAL flush'], rows);
}
