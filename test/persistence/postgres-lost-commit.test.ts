import { describe, expect, it } from 'vitest';
import { isStoreUnavailableError } from '../../src/contracts/errors.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { collect, userMsg } from '../helpers/drafts.js';
import { proxiedDatabase, queryText, sqlText } from '../helpers/pg-proxy.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';

/**
 * A COMMIT whose reply is lost must be resolved by looking the batch up, never by a blind retry:
 * a TCP proxy between the store and the server forwards the COMMIT, then cuts the connection (the
 * server commits; the reply never arrives), or cuts it at a random other message.
 */
const db = await postgresForTests('PostgreSQL store: lost commit replies');
if (db) {
  describe('PostgreSQL store: a lost COMMIT reply', () => {
    const { proxy, url } = proxiedDatabase(db.url);

    const open = (schema: string): EventStore => postgresStore({ connectionString: url(), schema, idleInTransactionTimeoutMs: 2000 });

    it('an append whose COMMIT reached the server but whose reply was lost resolves with the stored events, written once', async () => {
      const store = open(freshSchema('lost'));
      try {
        const { writerEpoch } = await store.attachWriter('s');
        let armed = true;
        proxy.decide = (m) => {
          if (armed && m.from === 'client' && queryText(m)?.startsWith('COMMIT')) {
            armed = false;
            return 'forward-then-drop';
          }
          return 'forward';
        };
        const cutsBefore = proxy.cuts;
        // no eventIds: the store's generated ids are the only way to recognise the batch
        const got = await store.append('s', writerEpoch, 1, [userMsg('one'), userMsg('two')]);
        expect(proxy.cuts - cutsBefore, 'the COMMIT reply was cut').toBe(1);
        expect(armed).toBe(false);
        const log = await collect(store.readEvents('s'));
        expect(log.map((e) => e.payload.message)).toMatchObject([{ content: 'one' }, { content: 'two' }]);
        expect(got).toEqual(log);
        expect((await store.getHead('s'))!.lastSeq).toBe(2);
        // and the writer carries on at the right seq
        await store.append('s', writerEpoch, 3, [userMsg('three')]);
        expect((await collect(store.readEvents('s'))).map((e) => e.seq)).toEqual([1, 2, 3]);
      } finally {
        proxy.decide = () => 'forward';
        await store.close();
      }
    });

    it("when the server cannot be asked, the append fails with outcome 'unknown' — and the log later says it landed", async () => {
      const store = open(freshSchema('unknown'));
      try {
        const { writerEpoch } = await store.attachWriter('u');
        let armed = true;
        proxy.decide = (m) => {
          if (armed && m.from === 'client' && queryText(m)?.startsWith('COMMIT')) {
            armed = false;
            proxy.refuse = true; // the server is gone for the store from here on
            return 'forward-then-drop';
          }
          return 'forward';
        };
        const err = await store.append('u', writerEpoch, 1, [{ ...userMsg('maybe'), eventId: 'm1' }]).catch((e) => e);
        expect(isStoreUnavailableError(err), String(err)).toBe(true);
        expect(err.outcome).toBe('unknown');
        proxy.refuse = false;
        expect((await store.getEventById('u', 'm1'))?.payload.message).toMatchObject({ content: 'maybe' });
        // the writer's retry of the same batch is recognised as done
        const again = await store.append('u', writerEpoch, 1, [{ ...userMsg('maybe'), eventId: 'm1' }]);
        expect(again.map((e) => e.seq)).toEqual([1]);
      } finally {
        proxy.refuse = false;
        proxy.decide = () => 'forward';
        await store.close();
      }
    });

    it("a submit whose reply was lost fails with outcome 'unknown' and the generated entryId, and a retry with that id is recognised", async () => {
      const store = postgresStore({ connectionString: url(), schema: freshSchema('submit') });
      const runtime = createRuntime({ store });
      try {
        await store.ready!();
        let armed = true;
        let inSubmit = false;
        proxy.decide = (m) => {
          if (m.from !== 'client') return 'forward';
          const sql = sqlText(m);
          if (sql !== undefined) inSubmit = sql.includes('.inbox');
          if (armed && inSubmit && m.type === 'S') {
            armed = false; // the statement reaches the server; its reply is lost
            return 'forward-then-drop';
          }
          return 'forward';
        };
        const err = await runtime.submit('s', 'hello').catch((e) => e);
        expect(armed, 'the submit was cut').toBe(false);
        expect(isStoreUnavailableError(err), String(err)).toBe(true);
        expect(err.outcome).toBe('unknown');
        const stored = await store.work!.pending('s');
        expect(stored.map((e) => e.entryId)).toEqual([err.entryId]);
        const again = await runtime.submit('s', { kind: 'input', inputId: err.entryId, mode: 'follow_up', message: 'hello' });
        expect(again.status).toBe('already_accepted');
        expect((await store.work!.pending('s')).length).toBe(1);
      } finally {
        proxy.decide = () => 'forward';
        await runtime.close();
        await store.close();
      }
    });

    it('an append cut at a random message either lands once or not at all, and says which', async () => {
      const store = open(freshSchema('random'));
      try {
        const { writerEpoch } = await store.attachWriter('r');
        let next = 1;
        let counter = 0;
        let cutAt = -1;
        proxy.decide = (m) => {
          if (cutAt >= 0 && ++counter === cutAt) {
            cutAt = -1;
            return Math.random() < 0.5 ? 'forward-then-drop' : 'drop';
          }
          return 'forward';
        };
        const acked: EventRecord[][] = [];
        const refused: string[] = [];
        for (let i = 1; i <= 40; i++) {
          counter = 0;
          cutAt = 1 + Math.floor(Math.random() * 12); // within the append's messages, either direction
          const batch = [userMsg(`b${i}-x`), userMsg(`b${i}-y`)];
          try {
            const r = await store.append('r', writerEpoch, next, batch);
            acked.push(r);
            next += r.length;
          } catch (e) {
            // only a typed store error, and only one saying nothing landed
            expect(isStoreUnavailableError(e), String(e)).toBe(true);
            refused.push(`b${i}`);
            const head = await store.getHead('r');
            next = head!.lastSeq + 1;
          }
        }
        cutAt = -1;
        const log = await collect(store.readEvents('r'));
        expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
        const contents = log.map((e) => (e.payload.message as { content: string }).content);
        expect(new Set(contents).size, 'no batch was written twice').toBe(contents.length);
        for (const r of acked) expect(log.slice(r[0]!.seq - 1, r[0]!.seq + 1)).toEqual(r);
        // every batch is whole: x and y side by side
        for (let k = 0; k < contents.length; k += 2) expect(contents[k]!.replace(/-x$/, '-y')).toBe(contents[k + 1]);
        expect(acked.length + refused.length).toBe(40);
        console.log(
          `lost-commit random cuts: ${proxy.cuts} cuts, ${acked.length} acknowledged, ${refused.length} refused, log ${log.length} events`,
        );
      } finally {
        proxy.decide = () => 'forward';
        await store.close();
      }
    }, 120_000);
  });
}
