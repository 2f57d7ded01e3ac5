import { join } from 'node:path';
import pg from 'pg';
import { firstValueFrom, take, toArray } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { isCorruptLogError, isStaleWriterError, isStoreUnavailableError, isValidationError } from '../../src/contracts/errors.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { SCHEMA_VERSION_PG } from '../../src/persistence/postgres/schema.js';
import { killAllChildren, parseAck, REPO_ROOT, spawnTs } from '../crash/child-util.js';
import { collect, userMsg } from '../helpers/drafts.js';
import { backendsGone, backendsNamed, freshSchema, postgresForTests, withApplicationName } from '../helpers/postgres.js';

/** What the PostgreSQL store adds to the shared contract: schema, durability, connections, tailing across processes. */
const db = await postgresForTests('PostgreSQL store');
if (db) {
  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  const connectionsOf = (appName: string) => backendsNamed(db.url, appName);
  const urlWithApp = (name: string) => withApplicationName(db.url, name);

  describe('PostgreSQL store', () => {
    afterEach(killAllChildren);

    it('concurrent first uses migrate once (advisory lock), and a newer schema version is refused by name', async () => {
      const schema = freshSchema('mig');
      const stores = Array.from({ length: 5 }, () => postgresStore({ connectionString: db.url, schema }));
      await Promise.all(stores.map((s) => s.listSessions()));
      await Promise.all(stores.map((s) => s.close()));
      const versions = await admin(async (c) =>
        (await c.query(`SELECT version FROM "${schema}".actorloop_schema ORDER BY version`)).rows.map((r) => r.version),
      );
      expect(versions).toEqual(Array.from({ length: SCHEMA_VERSION_PG }, (_, i) => i + 1));
      await admin((c) => c.query(`INSERT INTO "${schema}".actorloop_schema (version) VALUES (${SCHEMA_VERSION_PG + 1})`));
      for (const migrate of [true, false]) {
        const s = postgresStore({ connectionString: db.url, schema, migrate });
        const err = await s.listSessions().catch((e) => e);
        expect(isStoreUnavailableError(err)).toBe(true);
        expect(err.message).toContain(`is at version ${SCHEMA_VERSION_PG + 1}, which this version of actorloop does not know`);
        await s.close();
      }
    });

    it("refuses synchronous_commit below 'on' unless opened with durability 'committed'", async () => {
      const u = new URL(db.url);
      u.searchParams.set('options', '-c synchronous_commit=off');
      const weak = postgresStore({ connectionString: u.toString(), schema: freshSchema('sync') });
      const err = await weak.attachWriter('s').catch((e) => e);
      expect(isStoreUnavailableError(err)).toBe(true);
      expect(err.message).toContain("synchronous_commit is 'off'");
      await weak.close();
      const accepted = postgresStore({ connectionString: u.toString(), schema: freshSchema('sync'), durability: 'committed' });
      expect((await accepted.attachWriter('s')).writerEpoch).toBe(1);
      await accepted.close();
    });

    it('close() ends every connection it opened, LISTEN included', async () => {
      const app = `al_close_${process.pid}`;
      const store = postgresStore({ connectionString: urlWithApp(app), schema: freshSchema('close') });
      const { writerEpoch } = await store.attachWriter('s');
      const seen = firstValueFrom(store.events$('s').pipe(take(2), toArray()));
      await store.append('s', writerEpoch, 1, [userMsg('a'), userMsg('b')]);
      expect((await seen).map((e) => e.seq)).toEqual([1, 2]);
      const sub = store.events$('s').subscribe(); // a follower still open at close
      expect(await connectionsOf(app)).toBeGreaterThanOrEqual(2); // a query connection and LISTEN
      await store.close();
      expect(sub.closed).toBe(true);
      // every connection was told to end (Terminate) by close()
      await backendsGone(db.url, app, 3000);
    });

    it("with the app's own pool: works on it, and close() leaves the pool open but ends its LISTEN connection", async () => {
      const app = `al_pool_${process.pid}`;
      const pool = new pg.Pool({ connectionString: urlWithApp(app), max: 4 });
      const store = postgresStore({ pool, schema: freshSchema('pool') });
      const { writerEpoch } = await store.attachWriter('s');
      const seen = firstValueFrom(store.events$('s').pipe(take(1)));
      await store.append('s', writerEpoch, 1, [userMsg('a')]);
      expect((await seen).seq).toBe(1);
      await store.close();
      expect((await pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      const listening = await admin(
        async (c) =>
          (await c.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [app])).rows[0]
            .n,
      );
      expect(Number(listening)).toBe(0);
      await pool.end();
    });

    it('stores of two schemas share one pool, each with its own tables and prepared statements', async () => {
      const pool = new pg.Pool({ connectionString: db.url, max: 1 }); // one connection: both stores' statements on it
      const long = 'x'.repeat(30);
      const [a, b] = [`${long}_a`, `${long}_b`].map((schema) => postgresStore({ pool, schema }));
      for (const [store, n] of [
        [a!, 1],
        [b!, 2],
      ] as const) {
        const { writerEpoch } = await store.attachWriter('s');
        await store.append(
          's',
          writerEpoch,
          1,
          Array.from({ length: n }, (_, i) => userMsg(`m${i}`)),
        );
      }
      expect((await collect(a!.readEvents('s'))).length).toBe(1);
      expect((await collect(b!.readEvents('s'))).length).toBe(2);
      await a!.close();
      await b!.close();
      await pool.end();
    });

    it('events$ follows appends made by another process, woken by NOTIFY', async () => {
      const schema = freshSchema('tail');
      const store = postgresStore({ connectionString: db.url, schema, pollIntervalMs: 60_000 }); // no poll: only NOTIFY wakes it
      try {
        await store.listSessions(); // the schema exists before the child starts
        const seen = firstValueFrom(store.events$('alpha').pipe(take(30), toArray()));
        const child = spawnTs(join(REPO_ROOT, 'test/crash/pg-store-child.ts'), ['append', db.url, schema, 'alpha'], { label: 'appender' });
        const events = await seen;
        child.signal('SIGKILL');
        expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
        expect(child.lines.map(parseAck).filter(Boolean).length).toBeGreaterThan(0);
      } finally {
        await store.close();
      }
    });

    it('a follower re-reads after its LISTEN connection was cut, so a notification lost meanwhile only delays', async () => {
      const app = `al_listen_${process.pid}`;
      const schema = freshSchema('relisten');
      const reader = postgresStore({ connectionString: urlWithApp(app), schema, pollIntervalMs: 60_000 });
      const writer = postgresStore({ connectionString: db.url, schema });
      try {
        const { writerEpoch } = await writer.attachWriter('s');
        await writer.append('s', writerEpoch, 1, [userMsg('1')]);
        const got: number[] = [];
        const sub = reader.events$('s').subscribe((e) => got.push(e.seq));
        while (got.length < 1) await new Promise((r) => setTimeout(r, 20));
        // cut LISTEN, and append while it is down: that NOTIFY reaches nobody
        const cut = await admin((c) =>
          c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [app]),
        );
        expect(cut.rowCount, 'the LISTEN connection was found and cut').toBe(1);
        await writer.append('s', writerEpoch, 2, [userMsg('2')]);
        const deadline = Date.now() + 10_000;
        while (got.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        sub.unsubscribe();
        expect(got).toEqual([1, 2]);
      } finally {
        await reader.close();
        await writer.close();
      }
    });

    it('a damaged head row or record is a CorruptLogError naming the session, never retried into another error', async () => {
      const schema = freshSchema('corrupt');
      const store = postgresStore({ connectionString: db.url, schema });
      try {
        const { writerEpoch } = await store.attachWriter('s');
        await store.append('s', writerEpoch, 1, [userMsg('a'), userMsg('b')]);
        await admin((c) => c.query(`UPDATE "${schema}".events SET record = '{"truncated' WHERE seq = 2`));
        const read = await collect(store.readEvents('s')).catch((e) => e);
        expect(isCorruptLogError(read) && read.seq === 2 && read.sessionId === 's', String(read)).toBe(true);
        await admin((c) => c.query(`UPDATE "${schema}".sessions SET pending_inputs = '"nope"'`));
        const head = await store.getHead('s').catch((e) => e);
        expect(isCorruptLogError(head), String(head)).toBe(true);
        const other = postgresStore({ connectionString: db.url, schema }); // no cached head: the append reads the row
        const append = await other.append('s', writerEpoch, 3, [userMsg('c')]).catch((e) => e);
        expect(isCorruptLogError(append), String(append)).toBe(true);
        await other.close();
      } finally {
        await store.close();
      }
    });

    it('a beforeCommit hook that throws aborts its append, once, and nothing of it lands', async () => {
      let calls = 0;
      const boom = new Error('boom');
      const store = postgresStore({
        connectionString: db.url,
        schema: freshSchema('hook'),
        beforeCommit: () => {
          calls++;
          if (calls === 1) throw boom;
        },
      });
      try {
        const { writerEpoch } = await store.attachWriter('s');
        await expect(store.append('s', writerEpoch, 1, [userMsg('x')])).rejects.toBe(boom);
        expect(calls).toBe(1);
        expect(await collect(store.readEvents('s'))).toEqual([]);
        await store.append('s', writerEpoch, 1, [userMsg('y')]);
        expect((await collect(store.readEvents('s'))).map((e) => e.seq)).toEqual([1]);
      } finally {
        await store.close();
      }
    });

    it('a session id with a lone surrogate is a ValidationError before anything is written, so two such ids never become one', async () => {
      const store = postgresStore({ connectionString: db.url, schema: freshSchema('surrogate') });
      try {
        for (const id of ['user-\ud800', 'user-\udbff']) {
          const err = await store.attachWriter(id).catch((e) => e);
          expect(isValidationError(err), String(err)).toBe(true);
          const submit = await store.work.submit(id, { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'x' }).catch((e) => e);
          expect(isValidationError(submit), String(submit)).toBe(true);
        }
        expect(await store.listSessions()).toEqual([]);
      } finally {
        await store.close();
      }
    });

    it('options with neither pool nor connectionString are refused with a message naming both', () => {
      const err = (() => {
        try {
          postgresStore({} as never);
        } catch (e) {
          return e;
        }
      })();
      expect(isValidationError(err), String(err)).toBe(true);
      expect((err as Error).message).toContain('connectionString');
      expect((err as Error).message).toContain('pool');
    });

    it('maxConnections below 3 is refused by name: a serving worker holds two LISTEN connections and needs one more', () => {
      const err = (() => {
        try {
          postgresStore({ connectionString: db.url, maxConnections: 2 });
        } catch (e) {
          return e;
        }
      })();
      expect(isValidationError(err), String(err)).toBe(true);
      const issue = (err as { issues: { path: (string | number)[]; message: string }[] }).issues[0]!;
      expect(issue.path).toEqual(['maxConnections']);
      expect(issue.message).toContain('LISTEN');
    });

    it('timeouts PostgreSQL cannot take, or a lock timeout not above the idle timeout, are refused by name before anything runs', () => {
      const refusal = (options: Record<string, unknown>) => {
        try {
          postgresStore(('pool' in options ? options : { connectionString: db.url, ...options }) as never);
        } catch (e) {
          expect(isValidationError(e), String(e)).toBe(true);
          return (e as { issues: { path: (string | number)[]; message: string }[] }).issues[0]!;
        }
        throw new Error(`accepted: ${JSON.stringify(options)}`);
      };
      expect(refusal({ lockTimeoutMs: 1e12 }).path).toEqual(['lockTimeoutMs']);
      expect(refusal({ idleInTransactionTimeoutMs: 3e9, lockTimeoutMs: 2_147_483_647 }).path).toEqual(['idleInTransactionTimeoutMs']);
      expect(refusal({ lockTimeoutMs: 1.5 }).path).toEqual(['lockTimeoutMs']);
      const order = refusal({ lockTimeoutMs: 1000, idleInTransactionTimeoutMs: 5000 });
      expect(order.path).toEqual(['lockTimeoutMs']);
      expect(order.message).toContain('idleInTransactionTimeoutMs');
      const pool = new pg.Pool({ connectionString: db.url });
      try {
        expect(refusal({ pool, lockTimeoutMs: 5000 }).path).toEqual(['lockTimeoutMs']);
      } finally {
        void pool.end();
      }
    });

    it('an operation waiting for a connection of a full pool fails after connectionTimeoutMs with StoreUnavailableError, never hangs', async () => {
      let open!: () => void;
      const held = new Promise<void>((r) => (open = r));
      const store = postgresStore({
        connectionString: db.url,
        schema: freshSchema('full'),
        maxConnections: 3,
        connectionTimeoutMs: 300,
        beforeCommit: () => held, // each append holds its connection until `open()`
      });
      try {
        const sub = store.events$('f').subscribe({ error: () => undefined }); // the LISTEN connection (its read may time out too)
        const epochs = await Promise.all(['a', 'b'].map((sid) => store.attachWriter(sid)));
        const appends = ['a', 'b'].map((sid, i) => store.append(sid, epochs[i]!.writerEpoch, 1, [userMsg(sid)]));
        await new Promise((r) => setTimeout(r, 100)); // both appends are inside their transactions
        const t0 = Date.now();
        const err = await store.getHead('c').catch((e) => e);
        expect(isStoreUnavailableError(err) && err.outcome === 'not_written', String(err)).toBe(true);
        expect(Date.now() - t0).toBeLessThan(3000);
        open();
        await Promise.all(appends);
        sub.unsubscribe();
      } finally {
        open();
        await store.close();
      }
    });

    it('attachWriter fences in one statement across store objects; the stale one is refused', async () => {
      const schema = freshSchema('fence');
      const a = postgresStore({ connectionString: db.url, schema });
      const b = postgresStore({ connectionString: db.url, schema });
      try {
        const ea = await a.attachWriter('s');
        await a.append('s', ea.writerEpoch, 1, [userMsg('a')]);
        const eb = await b.attachWriter('s');
        expect(eb).toEqual({ writerEpoch: 2, lastSeq: 1, lastTurn: 1 });
        // a's cached head is stale: the fence in the transaction refuses it
        await expect(a.append('s', ea.writerEpoch, 2, [userMsg('late')])).rejects.toSatisfy(isStaleWriterError);
        await b.append('s', eb.writerEpoch, 2, [userMsg('b')]);
        expect((await collect(a.readEvents('s'))).map((e) => e.writerEpoch)).toEqual([1, 2]);
      } finally {
        await a.close();
        await b.close();
      }
    });
  });
}

describe('PostgreSQL store options (no server needed)', () => {
  it('a schema name over 63 bytes in UTF-8 is a ValidationError, so two long names never share the schema PostgreSQL cuts them to', async () => {
    const url = 'postgres://postgres@127.0.0.1:5432/postgres';
    // 32 two-byte characters: 32 characters, 64 bytes
    expect(() => postgresStore({ connectionString: url, schema: 'é'.repeat(32) })).toThrow(/schema: must be at most 63 bytes/);
    let err: unknown;
    try {
      postgresStore({ connectionString: url, schema: 'a'.repeat(64) });
    } catch (e) {
      err = e;
    }
    expect(isValidationError(err)).toBe(true);
    await postgresStore({ connectionString: url, schema: `${'é'.repeat(31)}a` }).close(); // 63 bytes
  });
});
