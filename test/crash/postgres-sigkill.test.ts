import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { collect } from '../helpers/drafts.js';
import { backendsGone, freshSchema, postgresForTests, withApplicationName } from '../helpers/postgres.js';
import {
  checkBatchLog,
  crashRounds,
  killAllChildren,
  parseAck,
  parseAttached,
  REPO_ROOT,
  sleep,
  spawnTs,
  type Ack,
  type ChildRun,
} from './child-util.js';

/**
 * SIGKILL at a random instant while a real process appends to two sessions of one PostgreSQL
 * schema (concurrent transactions). After every kill the parent checks that every acknowledged
 * batch is there with its exact content, that no batch is partial and that seq is contiguous;
 * the next child attaches (a new epoch) and carries on from the tail.
 */
const ROUNDS = crashRounds(8);
const SESSIONS = ['alpha', 'beta'];
const CHILD = join(REPO_ROOT, 'test/crash/pg-store-child.ts');
/** Each child's connections carry its name (pg_stat_activity.application_name). */
const childName = (n: number) => `sigkill-child-${process.pid}-${n}`;

const db = await postgresForTests('PostgreSQL store under SIGKILL');
if (db) {
  describe('PostgreSQL store under SIGKILL', () => {
    afterEach(killAllChildren);

    it(`keeps every acknowledged batch, whole, across ${ROUNDS} kills`, async () => {
      const schema = freshSchema('sigkill');
      const acks: Ack[] = [];
      const tails = new Map(SESSIONS.map((s) => [s, 0]));
      let epoch = 0;
      const spawned: ChildRun[] = [];
      const prefetch = (upTo: number) => {
        while (spawned.length < Math.min(upTo, ROUNDS)) {
          spawned.push(
            spawnTs(
              CHILD,
              ['append', withApplicationName(db.url, childName(spawned.length + 1)), schema, SESSIONS.join(','), '--wait-go'],
              {
                label: `append child ${spawned.length + 1}`,
              },
            ),
          );
        }
      };
      for (let round = 1; round <= ROUNDS; round++) {
        prefetch(round + 1);
        const child = spawned[round - 1]!;
        await child.waitFor((l) => l === 'READY', 30_000, 'READY');
        child.send('GO');
        await child.waitFor((l) => l.startsWith('ACK '), 30_000, 'the first ACK');
        // every session attached before the kill (a loaded machine can ack one before the others attach)
        for (const s of SESSIONS) await child.waitFor((l) => parseAttached(l)?.sessionId === s, 30_000, `${s} attached`);
        await sleep(30 + Math.random() * 270);
        child.signal('SIGKILL');
        const exit = await child.waitExit(10_000);
        expect(exit.signal, child.describe()).toBe('SIGKILL');
        // its last COMMIT may still land: the tail is read once its backends are gone
        await backendsGone(db.url, childName(round));
        expect(
          child.lines.filter((l) => l.startsWith('ERROR')),
          child.describe(),
        ).toEqual([]);
        for (const s of SESSIONS) {
          const attached = child.lines.map(parseAttached).find((a) => a?.sessionId === s);
          expect(attached!.lastSeq, `round ${round}: ${s} resumed at the verified tail`).toBe(tails.get(s));
          expect(attached!.writerEpoch).toBe(epoch + 1);
        }
        epoch++;
        acks.push(...child.lines.map(parseAck).filter((a): a is Ack => a !== undefined));
        const store = postgresStore({ connectionString: db.url, schema });
        try {
          for (const s of SESSIONS) {
            const events: EventRecord[] = await collect(store.readEvents(s));
            const { problems, lastSeq } = checkBatchLog(s, events, acks);
            expect(problems, `round ${round}, session ${s}`).toEqual([]);
            expect((await store.getHead(s))?.lastSeq, `round ${round}: ${s} head agrees with the log`).toBe(lastSeq);
            tails.set(s, lastSeq);
          }
        } finally {
          await store.close();
        }
      }
      expect(acks.length).toBeGreaterThan(ROUNDS);
      console.log(
        `postgres sigkill: ${ROUNDS} rounds, ${acks.length} acknowledged batches, tails ${JSON.stringify(Object.fromEntries(tails))}`,
      );
    });
  });
}
