import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isStoreUnavailableError } from '../../src/contracts/errors.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { userMsg } from '../helpers/drafts.js';
import { freshSchema, postgresForTests, withApplicationName } from '../helpers/postgres.js';

/**
 * The server ending the store's connections at any moment — while they open, while they idle,
 * while they run a statement — fails operations with a typed error and never the process.
 */
const db = await postgresForTests('PostgreSQL store: connections the server ends');
if (db) {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** Terminates the backends named `app` until `stop()`; resolves to how many it ended. */
  const terminator = async (app: string) => {
    const killer = new pg.Client({ connectionString: db.url });
    killer.on('error', () => undefined);
    await killer.connect();
    let stopped = false;
    let kills = 0;
    const loop = (async () => {
      while (!stopped) {
        const r = await killer.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app]);
        kills += r.rowCount ?? 0;
        await sleep(Math.random() * 10);
      }
    })();
    return async () => {
      stopped = true;
      await loop;
      await killer.end();
      return kills;
    };
  };

  describe('PostgreSQL store: connections the server ends', () => {
    it.each(['own pool', "app's pool"])(
      'a connection terminated as it opens never crashes the process: operations succeed or fail with StoreUnavailableError (%s)',
      async (kind) => {
        const app = `al_term_${process.pid}_${kind === 'own pool' ? 'own' : 'app'}`;
        const url = withApplicationName(db.url, app);
        const pool = kind === 'own pool' ? undefined : new pg.Pool({ connectionString: url, max: 4 });
        pool?.on('error', () => undefined);
        const schema = freshSchema('term');
        const store = pool ? postgresStore({ pool, schema }) : postgresStore({ connectionString: url, schema, maxConnections: 4 });
        await store.ready();
        const { writerEpoch } = await store.attachWriter('w');
        const stop = await terminator(app);
        let running = true;
        let ok = 0;
        const other: unknown[] = [];
        const worker = async (i: number) => {
          while (running) {
            try {
              if (i === 0) {
                const head = await store.getHead('w');
                await store.append('w', writerEpoch, (head?.lastSeq ?? 0) + 1, [userMsg('x')]);
              } else await store.getHead(`s${i}`);
              ok++;
            } catch (e) {
              if (!isStoreUnavailableError(e)) other.push(e);
            }
          }
        };
        const workers = Array.from({ length: 6 }, (_, i) => worker(i));
        await sleep(1000);
        running = false;
        const kills = await stop();
        await Promise.all(workers);
        expect(kills, 'connections were terminated').toBeGreaterThan(10);
        expect(other.map(String)).toEqual([]);
        // the store works again once the server stops ending its connections
        expect(await store.getHead('none')).toBeUndefined();
        expect(ok).toBeGreaterThan(0);
        await store.close();
        await pool?.end();
      },
      15_000,
    );

    it('a follower whose read fails on a terminated connection reads again and misses nothing; it is never ended by it', async () => {
      const app = `al_follow_${process.pid}`;
      const schema = freshSchema('follow');
      const reader = postgresStore({ connectionString: withApplicationName(db.url, app), schema, pollIntervalMs: 200 });
      const writer = postgresStore({ connectionString: db.url, schema });
      try {
        const { writerEpoch } = await writer.attachWriter('s');
        const followers = Array.from({ length: 5 }, () => {
          const f = { seqs: [] as number[], error: undefined as unknown };
          reader.events$('s').subscribe({ next: (e) => f.seqs.push(e.seq), error: (e) => (f.error = e) });
          return f;
        });
        const stop = await terminator(app);
        let seq = 0;
        const until = Date.now() + 1000;
        while (Date.now() < until) {
          await writer.append('s', writerEpoch, ++seq, [userMsg(String(seq))]);
          await sleep(10);
        }
        const kills = await stop();
        expect(kills, 'connections were terminated').toBeGreaterThan(5);
        const all = Array.from({ length: seq }, (_, i) => i + 1);
        await expect.poll(() => followers.map((f) => f.error ?? f.seqs.length), { timeout: 5000 }).toEqual(followers.map(() => seq));
        for (const f of followers) expect(f.seqs).toEqual(all);
      } finally {
        await reader.close();
        await writer.close();
      }
    });
  });
}
