import pg from 'pg';
import { firstValueFrom, take } from 'rxjs';
import { describe, expect, it } from 'vitest';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { channelOf } from '../../src/persistence/postgres/schema.js';
import { workChannelOf } from '../../src/persistence/postgres/work.js';
import { userMsg } from '../helpers/drafts.js';
import { proxiedDatabase, sqlText } from '../helpers/pg-proxy.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';

/**
 * PostgreSQL serialises the commits of the transactions that sent a NOTIFY: each takes a
 * database-wide lock before its commit record and holds it until the commit is flushed. A NOTIFY
 * inside an append would make every append of the database wait for the WAL flush of the one
 * before it (no group commit: one flush per commit, measured by the serve bench). So the store's
 * wake-ups go out in transactions of their own, which write nothing to flush — and still arrive.
 * A proxy between the store and the server reads every statement the store sends.
 */
const db = await postgresForTests('PostgreSQL store: wake-ups outside writing transactions');
if (db) {
  describe('PostgreSQL store: wake-ups', () => {
    const { proxy, url } = proxiedDatabase(db.url);

    it('appends and submits send no NOTIFY from a transaction that writes, and listeners are still woken', async () => {
      const schema = freshSchema('notify');
      const violations: string[] = [];
      const inTxn = new Map<number, boolean>();
      proxy.decide = (m) => {
        const sql = m.from === 'client' ? sqlText(m) : undefined;
        if (sql === undefined) return 'forward';
        // statements of one message run in order: BEGIN opens a transaction, COMMIT or ROLLBACK ends it
        for (const part of sql.split(';').map((x) => x.trim())) {
          if (/^BEGIN/i.test(part)) inTxn.set(m.conn, true);
          else if (/^(COMMIT|ROLLBACK)/i.test(part)) inTxn.set(m.conn, false);
          else if (/pg_notify/i.test(part) && (inTxn.get(m.conn) || /\b(INSERT|UPDATE|DELETE)\b/i.test(part)))
            violations.push(part.slice(0, 120));
        }
        return 'forward';
      };
      const store = postgresStore({ connectionString: url(), schema });
      const listener = new pg.Client({ connectionString: db.url });
      try {
        await store.listSessions(); // the schema exists
        await listener.connect();
        const heard: string[] = [];
        listener.on('notification', (n) => heard.push(`${n.channel} ${n.payload}`));
        await listener.query(`LISTEN "${channelOf(schema)}"; LISTEN "${workChannelOf(schema)}"`);

        for (const sid of ['a', 'b']) {
          const { writerEpoch } = await store.attachWriter(sid);
          await store.append(sid, writerEpoch, 1, [userMsg(`${sid}1`)]);
          await store.append(sid, writerEpoch, 2, [userMsg(`${sid}2`), userMsg(`${sid}3`)]);
        }
        expect((await store.work.submit('c', { kind: 'input', inputId: 'c-in', mode: 'follow_up', message: 'hi' })).status).toBe(
          'accepted',
        );

        await expect.poll(() => heard.length, { timeout: 5000 }).toBeGreaterThanOrEqual(5);
        expect(heard.filter((h) => h === `${channelOf(schema)} a`)).toHaveLength(2);
        expect(heard.filter((h) => h === `${channelOf(schema)} b`)).toHaveLength(2);
        expect(heard).toContain(`${workChannelOf(schema)} c`);
        expect(violations).toEqual([]);
      } finally {
        proxy.decide = () => 'forward';
        await listener.end().catch(() => undefined);
        await store.close();
      }
    });

    it('a schema name of 63 bytes gets its wake-ups: appends and submits are notified on channels that fit, no append is resolved as a lost commit', async () => {
      const schema = `${freshSchema('long')}_${'x'.repeat(63)}`.slice(0, 63);
      const sent: string[] = [];
      proxy.decide = (m) => {
        const sql = m.from === 'client' ? sqlText(m) : undefined;
        if (sql !== undefined) sent.push(sql);
        return 'forward';
      };
      const writer = postgresStore({ connectionString: url(), schema });
      const follower = postgresStore({ connectionString: db.url, schema, pollIntervalMs: 60_000 }); // no poll: only NOTIFY wakes it
      try {
        await writer.listSessions(); // the schema exists
        const { writerEpoch } = await writer.attachWriter('s');
        await writer.append('s', writerEpoch, 1, [userMsg('1')]);
        const seen = firstValueFrom(follower.events$('s', { fromSeq: 2 }).pipe(take(1)));
        const woken = firstValueFrom(follower.work.wakeups$.pipe(take(1)));
        await new Promise((r) => setTimeout(r, 200)); // the follower's LISTENs are in place
        await writer.append('s', writerEpoch, 2, [userMsg('2')]);
        await writer.work.submit('s', { kind: 'input', inputId: 'in', mode: 'follow_up', message: 'hi' });
        const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('no wake-up within 5 s')), 5000));
        expect(((await Promise.race([seen, timeout])) as { seq: number }).seq).toBe(2);
        expect(await Promise.race([woken, timeout])).toBe('s');
        expect(
          sent.filter((q) => /FOR SHARE/i.test(q)),
          'no append took the lost-commit path',
        ).toEqual([]);
        expect(Buffer.byteLength(channelOf(schema))).toBeLessThanOrEqual(63);
      } finally {
        proxy.decide = () => 'forward';
        await writer.close();
        await follower.close();
      }
    });
  });
}
