import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, it } from 'vitest';

/** The variable naming the server the PostgreSQL tests use (a URL to its maintenance database). */
export const PG_TEST_ENV = 'ACTORLOOP_TEST_POSTGRES';
const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  /** URL of a throwaway database made for this test file. */
  url: string;
  /** Drops it (also done after all tests of the file). */
  drop(): Promise<void>;
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

/**
 * Probes the test server (`ACTORLOOP_TEST_POSTGRES`, else 127.0.0.1:5432). Without one, a message
 * naming the variable (tests are skipped); under CI=true a missing server fails the run.
 */
export async function probePostgres(): Promise<{ url: string } | { missing: string }> {
  const url = process.env[PG_TEST_ENV] || DEFAULT_URL;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return { url };
  } catch (e) {
    const missing = `no PostgreSQL server at ${url} (${(e as Error).message}): set ${PG_TEST_ENV}=postgres://user@host:port/db to run the PostgreSQL tests`;
    if (process.env.CI === 'true') throw new Error(`${missing} — required under CI=true (.ci/run starts the server)`);
    return { missing };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Creates a throwaway database on the server at `url`, dropped after the file's tests. */
export async function createTestDatabase(url: string): Promise<TestDatabase> {
  const name = `actorloop_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  let dropped = false;
  const drop = async () => {
    if (dropped) return;
    dropped = true;
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    } finally {
      await c.end();
    }
  };
  afterAll(drop);
  return { url: withDatabase(url, name), drop };
}

/**
 * The server for this test file: a throwaway database, or undefined after registering one skipped
 * test that says which variable to set.
 */
export async function postgresForTests(what: string): Promise<TestDatabase | undefined> {
  const probe = await probePostgres();
  if ('missing' in probe) {
    describe(what, () => it.skip(probe.missing, () => undefined));
    console.warn(`skipping ${what}: ${probe.missing}`);
    return undefined;
  }
  return createTestDatabase(probe.url);
}

let schemas = 0;
/** A fresh schema name, so that each test's store starts empty inside the file's database. */
export const freshSchema = (prefix = 't'): string => `${prefix}_${process.pid}_${++schemas}`;

/** `url` with `application_name` set: the server's pg_stat_activity names every connection made with it. */
export function withApplicationName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

/** The server's backends (pg_stat_activity) of the connections named `name` (withApplicationName). */
export async function backendsNamed(url: string, name: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [name]);
    return rows[0].n as number;
  } finally {
    await c.end();
  }
}

/**
 * Resolves once no backend of the connections named `name` (withApplicationName) is left on the
 * server at `url` (a backend leaves pg_stat_activity a moment after its client's socket closes). A
 * SIGKILLed client's backend finishes the statement it was given — a COMMIT sent just before the
 * kill still lands — and exits when it next talks to the client: only after that does a read see
 * everything the killed client will ever have committed.
 */
export async function backendsGone(url: string, name: string, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (let n = await backendsNamed(url, name); n > 0; n = await backendsNamed(url, name)) {
    if (Date.now() > until) throw new Error(`${n} backend(s) of ${name} still on the server after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
