import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import {
  checkBatchLog,
  crashRounds,
  killAllChildren,
  type ChildRun,
  parseAck,
  parseAttached,
  sleep,
  spawnStoreChild,
  type Ack,
} from './child-util.js';

/**
 * SIGKILL at a random instant while a real process appends to two sessions of one LMDB file
 * (group commit: both sessions' batches share transactions). After every kill the parent reopens
 * the store and checks that every acknowledged batch is there with its exact content, that no
 * batch is partial and that seq is contiguous from 1; the next child attaches (a new epoch) and
 * carries on from the tail. ACTORLOOP_CRASH_ROUNDS raises the number of rounds.
 *
 * Every third round also simulates a machine restart (a power cut or kernel crash, after which
 * LMDB's unflushed pages cannot be trusted): data.mdb is overwritten with garbage and the store is
 * reopened under a new boot id, so it must rebuild the log from its journal alone — and every
 * acknowledged batch must still be there. The next child, under the real boot id, rebuilds again.
 */
const ROUNDS = crashRounds(20);
const SESSIONS = ['alpha', 'beta'];
/** Reading costs ~25 µs an event; the whole log is re-checked every FULL_EVERY rounds and at the end. */
const FULL_EVERY = 10;
const PREFETCH = 2;

describe('LMDB store under SIGKILL', () => {
  const dir = tempDir('actorloop-sigkill-');
  afterEach(killAllChildren);
  afterAll(dir.cleanup);

  it(`keeps every acknowledged batch, whole, across ${ROUNDS} kills`, async () => {
    const acks: Ack[] = [];
    const tails = new Map(SESSIONS.map((s) => [s, 0]));
    let epoch = 0;
    const killedWhile = { acked: 0, unackedTail: 0 };

    // Children are spawned PREFETCH rounds ahead: loading (tsx, zod, lmdb) costs about a second
    // of CPU, so the next ones load while this one runs. Each opens the store only on its cue,
    // after the previous round's checks.
    const spawned: ChildRun[] = [];
    const prefetch = (upTo: number) => {
      while (spawned.length < Math.min(upTo, ROUNDS)) {
        spawned.push(spawnStoreChild('append', [dir.path, SESSIONS.join(','), '--wait-go'], `append child, round ${spawned.length + 1}`));
      }
    };
    for (let round = 1; round <= ROUNDS; round++) {
      prefetch(round + PREFETCH);
      const child = spawned[round - 1]!;
      await child.waitFor((l) => l === 'READY', 30_000, 'READY');
      child.send('GO');
      await child.waitFor((l) => l.startsWith('ACK '), 30_000, 'the first ACK');
      await sleep(30 + Math.random() * 270);
      child.signal('SIGKILL');
      const exit = await child.waitExit(10_000);
      expect(exit.signal, child.describe()).toBe('SIGKILL');
      expect(
        child.lines.filter((l) => l.startsWith('ERROR')),
        child.describe(),
      ).toEqual([]);

      // Each session was attached by this child with a new epoch, exactly at the tail we verified.
      for (const s of SESSIONS) {
        const attached = child.lines.map(parseAttached).find((a) => a?.sessionId === s);
        expect(attached, `round ${round}: ${s} attached`).toBeDefined();
        expect(attached!.lastSeq, `round ${round}: ${s} resumed at the verified tail`).toBe(tails.get(s));
        expect(attached!.writerEpoch).toBe(epoch + 1);
      }
      epoch++;
      const roundAcks = child.lines.map(parseAck).filter((a): a is Ack => a !== undefined);
      acks.push(...roundAcks);

      const restart = round % 3 === 0;
      if (restart) writeFileSync(join(dir.path, 'data.mdb'), randomBytes(64 * 1024));
      const full = restart || round % FULL_EVERY === 0 || round === ROUNDS;
      const store = lmdbStore({ path: dir.path, ...(restart ? { bootId: `power-cut-${round}` } : {}) });
      try {
        for (const s of SESSIONS) {
          const from = full ? 1 : tails.get(s)! + 1;
          // readEvents must not throw; a throw fails the test with the store's typed error.
          const events: EventRecord[] = await collect(store.readEvents(s, { fromSeq: from }));
          const { problems, lastSeq } = checkBatchLog(s, events, full ? acks : roundAcks, { fromSeq: from });
          expect(problems, `round ${round}, session ${s}`).toEqual([]);
          const head = await store.getHead(s);
          expect(head?.lastSeq, `round ${round}: ${s} head agrees with the log`).toBe(lastSeq);
          expect(head?.writerEpoch).toBe(epoch);
          const lastAck = roundAcks.filter((a) => a.sessionId === s).at(-1);
          if (lastAck && lastSeq > lastAck.lastSeq) killedWhile.unackedTail++;
          else killedWhile.acked++;
          tails.set(s, lastSeq);
        }
      } finally {
        await store.close();
      }
    }
    expect(acks.length).toBeGreaterThan(ROUNDS);
    // Informative: how often a kill left committed-but-unacknowledged batches behind.
    console.log(
      `sigkill: ${ROUNDS} rounds, ${acks.length} acknowledged batches, tails ${JSON.stringify(Object.fromEntries(tails))}, kills ${JSON.stringify(killedWhile)}`,
    );
  });
});
