import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { INITIAL_STATE, Journal, segmentSize } from '../../src/persistence/journal.js';
import { currentBootId, openDbs, readState } from '../../src/persistence/journal-recovery.js';
import { repairStore } from '../../src/persistence/verify.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren, spawnStoreChild } from '../crash/child-util.js';

/**
 * The LMDB store's write-ahead journal (docs/event-log.md, "Durability"): LMDB never flushes;
 * each commit's frame is flushed instead, and after a machine restart (a new boot id) the LMDB
 * file is deleted unread and rebuilt from the journal. These tests simulate the restart with
 * the store's `bootId` option and a data.mdb overwritten with garbage.
 */

const dir = tempDirs('actorloop-journal-');

interface Dump {
  sessions: string[];
  heads: unknown[];
  events: EventRecord[][];
}

async function dump(path: string, bootId: string): Promise<Dump> {
  const store = lmdbStore({ path, bootId });
  try {
    const sessions = (await store.listSessions()).sort();
    return {
      sessions,
      heads: await Promise.all(sessions.map((s) => store.getHead(s))),
      events: await Promise.all(sessions.map((s) => collect(store.readEvents(s)))),
    };
  } finally {
    await store.close();
  }
}

/** Writes `batches` appends of `size`-character messages to each session; returns the last seq per session. */
async function write(path: string, bootId: string, sessions: string[], batches: number, size = 100): Promise<void> {
  const store = lmdbStore({ path, bootId });
  try {
    await Promise.all(
      sessions.map(async (s) => {
        const { writerEpoch, lastSeq } = await store.attachWriter(s);
        let next = lastSeq + 1;
        for (let b = 0; b < batches; b++) {
          const drafts = [{ ...userMsg(`${s}-${next}-${'x'.repeat(size)}`), eventId: `caller-${s}-${next}` }, stepStart()];
          await store.append(s, writerEpoch, next, drafts);
          next += drafts.length;
        }
      }),
    );
  } finally {
    await store.close();
  }
}

/** A store with no journal: written in 'committed' mode (like one from before the journal). */
async function writeWithoutJournal(path: string): Promise<void> {
  const old = lmdbStore({ path, durability: 'committed' });
  const { writerEpoch } = await old.attachWriter('legacy');
  await old.append('legacy', writerEpoch, 1, [userMsg('from before'), stepStart()]);
  await old.close();
}

/** Simulates a machine restart (garbage data.mdb, a new boot id) and expects the rebuilt log to be `expected`. */
async function expectRebuilt(path: string, bootId: string, expected: Dump): Promise<void> {
  trash(path);
  expect(await dump(path, bootId)).toEqual(expected);
}

const trash = (path: string) => writeFileSync(join(path, 'data.mdb'), randomBytes(128 * 1024));
const segments = (path: string) =>
  readdirSync(join(path, 'journal'))
    .filter((f) => f.endsWith('.wal'))
    .sort();

describe('LMDB store journal', () => {
  it('rebuilds the whole log — events, heads, caller and generated ids — from the journal after a restart', async () => {
    const path = dir();
    // ~3 KB events, 2 sessions × 150 batches: > 1 MiB, so segments 1 (256 KiB), 2 and 3 fill up
    await write(path, 'boot-1', ['a', 'b'], 150, 3000);
    expect(segments(path).length).toBeGreaterThanOrEqual(3);
    const before = await dump(path, 'boot-1');
    expect(before.events.map((e) => e.length)).toEqual([300, 300]);

    trash(path);
    const after = await dump(path, 'boot-2');
    expect(after).toEqual(before);

    const store = lmdbStore({ path, bootId: 'boot-2' });
    try {
      const generated = before.events[0]![1]!; // step/start: an id the store generated
      expect(await store.getEventById('a', generated.eventId)).toEqual(generated);
      expect((await store.getEventById('a', 'caller-a-3'))?.seq).toBe(3);
      // the head (writer epoch included) came back: the next attach continues from it
      const att = await store.attachWriter('a');
      expect(att.writerEpoch).toBe((before.heads[0] as { writerEpoch: number }).writerEpoch + 1);
      expect(att.lastSeq).toBe(300);
    } finally {
      await store.close();
    }
  });

  it('a frame larger than a whole segment gets a segment of its own size', async () => {
    const path = dir();
    await write(path, 'boot-1', ['big'], 1, 10);
    await write(path, 'boot-1', ['big'], 1, segmentSize(2) + 1000);
    await write(path, 'boot-1', ['big'], 2, 10);
    const segs = segments(path);
    expect(segs).toEqual(['0000000001.wal', '0000000002.wal', '0000000003.wal']);
    expect(statSync(join(path, 'journal', segs[1]!)).size).toBeGreaterThan(segmentSize(2));
    const before = await dump(path, 'boot-1');
    await expectRebuilt(path, 'boot-2', before);
  });

  it('prepares the next segment in the background once the current one is half full, and moves into it', async () => {
    const path = dir();
    // ~3.2 KB a commit: 50 commits ≈ 160 KB, past half of segment 1 (256 KiB), not past its end
    await write(path, 'boot-1', ['s'], 50, 3000);
    expect(segments(path)).toEqual(['0000000001.wal', '0000000002.wal']);
    const prepared = readFileSync(join(path, 'journal', '0000000002.wal'));
    expect(prepared.length).toBe(segmentSize(2));
    expect(prepared.every((b) => b === 0)).toBe(true);
    await write(path, 'boot-1', ['s'], 50, 3000); // crosses into segment 2
    expect(
      readFileSync(join(path, 'journal', '0000000002.wal'))
        .subarray(0, 4)
        .equals(Buffer.alloc(4)),
    ).toBe(false);
    const before = await dump(path, 'boot-1');
    expect(before.events[0]).toHaveLength(200);
    await expectRebuilt(path, 'boot-2', before);
  });

  it('under the same boot the LMDB file is trusted and the journal is not read; a new boot rebuilds from the journal', async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 5);
    // wipe the journal's frames (same size, all zeros)
    const seg = join(path, 'journal', segments(path)[0]!);
    writeFileSync(seg, Buffer.alloc(statSync(seg).size));
    expect((await dump(path, 'boot-1')).events[0]).toHaveLength(10);
    // the restart finds no frames: the rebuilt log is empty (what the journal said)
    expect((await dump(path, 'boot-2')).sessions).toEqual([]);
  });

  it('a torn last frame ends the journal; later commits overwrite it and a second rebuild keeps them', async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 4);
    const journal = new Journal(join(path, 'journal'));
    const gen = journal.frames();
    let it = gen.next();
    let frames = 0;
    while (!it.done) {
      frames++;
      it = gen.next();
    }
    const end = it.value;
    expect(frames).toBe(5); // attach + 4 appends
    // tear the last frame: flip its last payload byte
    const seg = join(path, 'journal', segments(path)[0]!);
    const bytes = readFileSync(seg);
    bytes[end.offset - 1] ^= 0xff;
    writeFileSync(seg, bytes);

    trash(path);
    const torn = await dump(path, 'boot-2');
    expect(torn.events[0]).toHaveLength(6); // the last append (2 events) is gone
    await write(path, 'boot-2', ['s'], 2);
    const continued = await dump(path, 'boot-2');
    expect(continued.events[0]!.map((e) => e.seq)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    await expectRebuilt(path, 'boot-3', continued);
  });

  it('adopts a store written without a journal (durability committed, or an older actorloop) as its first frames', async () => {
    const path = dir();
    await writeWithoutJournal(path);
    expect(existsSync(join(path, 'journal'))).toBe(false);

    const before = await dump(path, 'boot-1'); // migrates
    expect(before.events[0]).toHaveLength(2);
    await write(path, 'boot-1', ['legacy'], 1);
    const grown = await dump(path, 'boot-1');
    await expectRebuilt(path, 'boot-2', grown);
  });

  it("refuses durability 'committed' on a journaled store: its commits would be missing from a rebuild", async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 1);
    expect(() => lmdbStore({ path, durability: 'committed' })).toThrowError(/has a journal.*open it with 'flushed'/);
    expect((await dump(path, 'boot-1')).events[0]).toHaveLength(2);
  });

  it('a process killed while holding the recovery lock does not block the next rebuild (the kernel releases it)', async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 3);
    const before = await dump(path, 'boot-1');
    const holder = spawnStoreChild('hold-recovery', [path], 'recovery lock holder');
    try {
      await holder.waitFor((l) => l === 'LOCKED', 30_000, 'LOCKED');
      holder.signal('SIGKILL');
      expect((await holder.waitExit(10_000)).signal).toBe('SIGKILL');
    } finally {
      await killAllChildren();
    }
    await expectRebuilt(path, 'boot-2', before);
  });

  it('a frame left by a process killed before its commit is not replayed when the next commit moves to a new segment', async () => {
    const path = dir();
    const store = lmdbStore({ path, bootId: 'boot-1' });
    const { writerEpoch } = await store.attachWriter('s');
    let next = 1;
    const append = async (size: number) => {
      await store.append('s', writerEpoch, next, [userMsg('x'.repeat(size)), stepStart()]);
      next += 2;
    };
    for (let i = 0; i < 3; i++) await append(100);
    // another process writes and flushes its frame at the journal's end, then is killed before LMDB commits
    const dbs = openDbs(path);
    const ghost = new Journal(join(path, 'journal'));
    ghost.write(readState(dbs, path), JSON.stringify([['h', 'ghost', { never: 'committed' }]]));
    ghost.close();
    await dbs.env.close();
    await append(300 * 1024); // too large for the rest of segment 1: segment 2, same frame number
    for (let i = 0; i < 5; i++) await append(100);
    await store.close();
    const before = await dump(path, 'boot-1');
    expect(before.events[0]).toHaveLength(18);
    trash(path);
    expect(await dump(path, 'boot-2')).toEqual(before); // no ghost session, nothing lost
  });

  it('a damaged frame before the end of the journal is a CorruptLogError, and nothing is dropped', async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 300, 2000); // segments 1–3
    const segs = segments(path);
    const seg1 = join(path, 'journal', segs[0]!);
    const bytes = readFileSync(seg1);
    bytes[5000] ^= 0x01; // bit rot inside an early frame
    writeFileSync(seg1, bytes);
    trash(path);
    expect(() => lmdbStore({ path, bootId: 'boot-2' })).toThrowError(/damaged before its end/);
    expect(segments(path)).toEqual(segs);
    expect(readFileSync(join(path, 'data.mdb')).length).toBe(128 * 1024); // the old file, untouched
  });

  it('an interrupted migration is redone from the store, not rebuilt from its partial journal', async () => {
    const path = dir();
    await writeWithoutJournal(path);
    // a migration killed half way: journal.new/ with a frame, no BOOT, no journal/
    const partial = new Journal(join(path, 'journal.new'));
    partial.init();
    partial.write(INITIAL_STATE, JSON.stringify([['h', 'legacy', { partial: true }]]));
    partial.close();
    const migrated = await dump(path, 'boot-1');
    expect(migrated.events[0]!.map((e) => e.type)).toEqual(['user/message', 'step/start']);
    expect(existsSync(join(path, 'journal.new'))).toBe(false);
    await expectRebuilt(path, 'boot-2', migrated);
  });

  it("a failed commit's frame is invalidated only if no other commit took its place meanwhile", async () => {
    const path = dir();
    const b = lmdbStore({ path, bootId: 'boot-1' });
    const { writerEpoch } = await b.attachWriter('s');
    await b.append('s', writerEpoch, 1, [userMsg('first'), stepStart()]);
    // process A writes its frame at the end, then its commit fails and releases the writer lock
    const dbs = openDbs(path);
    const journalA = new Journal(join(path, 'journal'));
    const { at } = journalA.write(readState(dbs, path), JSON.stringify([['h', 'a-session', {}]]));
    journalA.close();
    await dbs.env.close();
    // B takes the lock first: its frame goes where A's was, and is acknowledged
    for (let seq = 3; seq < 23; seq += 2) await b.append('s', writerEpoch, seq, [userMsg(`m${seq}`), stepStart()]);
    // A's late invalidation (the store's own, which runs under the lock) must leave B's frame alone
    const a = lmdbStore({ path, bootId: 'boot-1' });
    (a as unknown as { invalidate(at: unknown): void }).invalidate(at);
    await a.close();
    await b.close();
    const before = await dump(path, 'boot-1');
    expect(before.events[0]).toHaveLength(22);
    await expectRebuilt(path, 'boot-2', before);
  });

  it("a 'committed' store opened before another one gave the path a journal is refused at its next commit", async () => {
    const path = dir();
    const committed = lmdbStore({ path, durability: 'committed' });
    const flushed = lmdbStore({ path, bootId: 'boot-1' }); // adopts the path: it has a journal now
    await expect(committed.attachWriter('s')).rejects.toThrowError(/has a journal/);
    const { writerEpoch } = await flushed.attachWriter('s');
    await flushed.append('s', writerEpoch, 1, [userMsg('flushed'), stepStart()]);
    await committed.close();
    await flushed.close();
    const before = await dump(path, 'boot-1');
    await expectRebuilt(path, 'boot-2', before);
  });

  it('an LMDB file deleted under the same boot is rebuilt from the journal at open', async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 2);
    const before = await dump(path, 'boot-1');
    for (const f of ['data.mdb', 'lock.mdb']) rmSync(join(path, f));
    expect(await dump(path, 'boot-1')).toEqual(before);
  });

  it("an LMDB file replaced by another store's under the same boot is refused at open, and repair rebuilds it from the journal", async () => {
    const path = dir();
    await write(path, 'boot-1', ['s'], 2);
    const before = await dump(path, 'boot-1');
    const other = dir();
    await write(other, 'boot-1', ['x'], 1);
    const o = openDbs(other);
    o.env.transactionSync(() => void o.journal.removeSync('state'));
    await o.env.close();
    for (const f of ['data.mdb', 'lock.mdb']) rmSync(join(path, f));
    copyFileSync(join(other, 'data.mdb'), join(path, 'data.mdb'));
    expect(() => lmdbStore({ path, bootId: 'boot-1' })).toThrowError(
      /no readable journal state.*actorloop repair .* to rebuild it from the journal/,
    );
    const { repaired, after } = await repairStore(path);
    expect({ repaired, ok: after.ok }).toEqual({ repaired: true, ok: true });
    expect(await dump(path, currentBootId())).toEqual(before);
  });

  it('counts commits, flushes and the time spent in flushes; a committed-mode store flushes nothing', async () => {
    const flushed = lmdbStore({ path: dir() });
    const committed = lmdbStore({ path: dir(), durability: 'committed' });
    try {
      for (const store of [flushed, committed]) {
        const { writerEpoch } = await store.attachWriter('s');
        await Promise.all([store.append('s', writerEpoch, 1, [userMsg('a')]), store.attachWriter('t')]); // one group commit
        await store.append('s', writerEpoch, 2, [stepStart()]);
      }
      expect(flushed.stats).toMatchObject({ commits: 3, flushes: 3, appends: 4 });
      expect(flushed.stats.flushMicros).toBeGreaterThan(0);
      expect(committed.stats).toEqual({ commits: 3, flushes: 0, appends: 4, flushMicros: 0 });
    } finally {
      await flushed.close();
      await committed.close();
    }
  });

  it('frames: an invalidated frame ends the journal there', () => {
    const path = dir();
    const journal = new Journal(join(path, 'journal'));
    journal.init();
    let state = INITIAL_STATE;
    const ats = [];
    for (const text of ['one', 'two', 'three']) {
      const { at, next } = journal.write(state, JSON.stringify([text]));
      ats.push(at);
      state = next;
    }
    journal.invalidate(ats[2]!);
    const seen: string[] = [];
    const gen = journal.frames();
    let it = gen.next();
    while (!it.done) {
      seen.push(JSON.parse(it.value.toString())[0]);
      it = gen.next();
    }
    journal.close();
    expect(seen).toEqual(['one', 'two']);
    expect(it.value).toEqual(ats[2]);
  });
});
