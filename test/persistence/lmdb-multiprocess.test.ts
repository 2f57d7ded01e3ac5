import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { checkBatchLog, killAllChildren, parseAck, parseAttached, spawnStoreChild, type Ack, type ChildRun } from '../crash/child-util.js';
import { collect, userMsg } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Several processes on one LMDB file: LMDB serialises their write transactions with one
 * cross-process lock; the store must keep every session's log whole and its epochs strictly
 * increasing whoever attaches.
 */
let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('actorloop-mp-');
});
afterEach(async () => {
  await killAllChildren();
  await dir.cleanup();
});

/** Spawns children that load first and start together on one cue (maximising overlap). */
async function startTogether(children: ChildRun[]): Promise<void> {
  await Promise.all(children.map((c) => c.waitFor((l) => l === 'READY', 30_000, 'READY')));
  for (const c of children) c.send('GO');
}

const acksOf = (c: ChildRun): Ack[] => c.lines.map(parseAck).filter((a): a is Ack => a !== undefined);

describe('LMDB store shared by several processes', () => {
  it('two processes append to different sessions of one file concurrently', async () => {
    const BATCHES = 60;
    const p1 = spawnStoreChild('append', [dir.path, 'p1-a,p1-b', `--batches=${BATCHES}`, '--wait-go'], 'process 1');
    const p2 = spawnStoreChild('append', [dir.path, 'p2-a,p2-b', `--batches=${BATCHES}`, '--wait-go'], 'process 2');
    await startTogether([p1, p2]);
    for (const p of [p1, p2]) {
      expect((await p.waitExit(45_000)).code, p.describe()).toBe(0);
      expect(p.lines.at(-1)).toBe('DONE');
    }
    const store = lmdbStore({ path: dir.path });
    try {
      expect((await store.listSessions()).sort()).toEqual(['p1-a', 'p1-b', 'p2-a', 'p2-b']);
      const spans: Record<string, [string, string]> = {};
      for (const [p, sessions] of [
        [p1, ['p1-a', 'p1-b']],
        [p2, ['p2-a', 'p2-b']],
      ] as const) {
        const acks = acksOf(p);
        for (const s of sessions) {
          const mine = acks.filter((a) => a.sessionId === s);
          expect(mine).toHaveLength(BATCHES);
          const events = await collect(store.readEvents(s));
          const { problems, lastSeq } = checkBatchLog(s, events, mine);
          expect(problems, s).toEqual([]);
          expect(lastSeq, `${s}: the log ends with the last acknowledged batch`).toBe(mine.at(-1)!.lastSeq);
          expect((await store.getHead(s))!).toMatchObject({ lastSeq, writerEpoch: 1 });
          spans[s] = [events[0]!.occurredAt, events.at(-1)!.occurredAt];
        }
      }
      // Informative only (no timing assertion): did the two processes' appends overlap in time?
      const overlap = spans['p1-a']![0] < spans['p2-a']![1] && spans['p2-a']![0] < spans['p1-a']![1];
      console.log(`multiprocess appends overlapped in time: ${overlap}`);
    } finally {
      await store.close();
    }
    // Both processes wrote their frames into one journal (serialised by LMDB's writer lock): after
    // a simulated machine restart the rebuilt log is the same.
    const snapshot = async (bootId?: string) => {
      const s = lmdbStore({ path: dir.path, ...(bootId ? { bootId } : {}) });
      try {
        const ids = (await s.listSessions()).sort();
        return {
          ids,
          heads: await Promise.all(ids.map((id) => s.getHead(id))),
          logs: await Promise.all(ids.map((id) => collect(s.readEvents(id)))),
        };
      } finally {
        await s.close();
      }
    };
    const before = await snapshot();
    writeFileSync(join(dir.path, 'data.mdb'), randomBytes(64 * 1024));
    expect(await snapshot('after-a-restart')).toEqual(before);
  });

  it('two processes opening after a machine restart: one rebuilds from the journal, the other waits for it', async () => {
    const first = lmdbStore({ path: dir.path, bootId: 'boot-1' });
    const { writerEpoch } = await first.attachWriter('before');
    for (let seq = 1; seq <= 100; seq++) await first.append('before', writerEpoch, seq, [userMsg(`before ${seq}`)]);
    await first.close();
    const reader = lmdbStore({ path: dir.path, bootId: 'boot-1' });
    const before = await collect(reader.readEvents('before'));
    await reader.close();
    writeFileSync(join(dir.path, 'data.mdb'), randomBytes(64 * 1024));

    process.env.ACTORLOOP_TEST_BOOT_ID = 'boot-2';
    const kids = [1, 2].map((i) => spawnStoreChild('append', [dir.path, `after-${i}`, '--batches=20', '--wait-go'], `process ${i}`));
    delete process.env.ACTORLOOP_TEST_BOOT_ID;
    await startTogether(kids); // both open the store at once: they race for recovery.lock
    for (const k of kids) {
      expect((await k.waitExit(45_000)).code, k.describe()).toBe(0);
      expect(k.lines.at(-1)).toBe('DONE');
    }
    const store = lmdbStore({ path: dir.path, bootId: 'boot-2' });
    try {
      expect(await collect(store.readEvents('before'))).toEqual(before);
      for (const [i, k] of kids.entries()) {
        const s = `after-${i + 1}`;
        const acks = acksOf(k);
        expect(acks).toHaveLength(20);
        expect(checkBatchLog(s, await collect(store.readEvents(s)), acks).problems).toEqual([]);
      }
    } finally {
      await store.close();
    }
  });

  it('racing attachWriter: epochs are distinct and strictly increasing, the fenced writer is refused', async () => {
    const ATTACHES = 15;
    const ROUNDS = 4;
    const S = 'contested';
    const racers = [1, 2].map((i) =>
      spawnStoreChild('race', [dir.path, S, `--attaches=${ATTACHES}`, `--rounds=${ROUNDS}`, '--wait-go'], `racer ${i}`),
    );
    await startTogether(racers);
    await Promise.all(racers.map((r) => r.waitFor((l) => l === 'OPEN', 30_000, 'OPEN')));
    let base = 0;
    let interleaved = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      const from = racers.map((r) => r.lines.length);
      const since = (r: ChildRun, i: number) => r.lines.slice(from[i]);
      for (const r of racers) r.send('GO'); // both attach ATTACHES times, racing
      await Promise.all(
        racers.map((r, i) => r.waitFor((l) => l === 'ATTACH_DONE', 30_000, `${ATTACHES} attaches, round ${round}`, from[i])),
      );

      const epochs = racers.map((r, i) =>
        since(r, i)
          .map(parseAttached)
          .filter((a) => a !== undefined)
          .map((a) => a.writerEpoch),
      );
      for (const mine of epochs) {
        expect(mine).toHaveLength(ATTACHES);
        expect(mine, 'each process sees its epochs strictly increase').toEqual([...new Set(mine)].sort((x, y) => x - y));
      }
      const all = epochs.flat().sort((x, y) => x - y);
      expect(all, 'no epoch handed out twice, none skipped').toEqual(Array.from({ length: 2 * ATTACHES }, (_, i) => base + i + 1));
      const top = all.at(-1)!;
      if (epochs[0]!.some((e) => e > Math.min(...epochs[1]!)) && epochs[1]!.some((e) => e > Math.min(...epochs[0]!))) interleaved++;
      base = top;

      for (const r of racers) r.send('GO2'); // both append with their last epoch
      await Promise.all(racers.map((r, i) => r.waitFor((l) => l === 'ROUND_DONE', 30_000, `round ${round} append`, from[i])));
      const w = epochs[0]!.at(-1) === top ? 0 : 1;
      const winner = since(racers[w]!, w);
      const loser = since(racers[1 - w]!, 1 - w);
      expect(
        winner.filter((l) => l.startsWith('ACK ')),
        racers[w]!.describe(),
      ).toHaveLength(1);
      expect(
        winner.filter((l) => l.startsWith('REFUSED')),
        racers[w]!.describe(),
      ).toEqual([]);
      expect(
        loser.filter((l) => l.startsWith('REFUSED') || l.startsWith('ACK ')),
        racers[1 - w]!.describe(),
      ).toEqual([`REFUSED StaleWriterError ${top}`]);

      const store = lmdbStore({ path: dir.path });
      try {
        const events = await collect(store.readEvents(S));
        expect(events).toHaveLength(2 * round);
        expect(checkBatchLog(S, events, racers.flatMap(acksOf)).problems).toEqual([]);
        expect(
          events.slice(-2).map((e) => e.writerEpoch),
          'the newest epoch wrote this round',
        ).toEqual([top, top]);
        expect((await store.getHead(S))!.writerEpoch).toBe(top);
      } finally {
        await store.close();
      }
    }
    for (const r of racers) expect((await r.waitExit(30_000)).code, r.describe()).toBe(0);
    // Informative only: in how many rounds the two processes' attaches actually interleaved.
    console.log(`attach race: epochs interleaved in ${interleaved} of ${ROUNDS} rounds`);
  });
});
