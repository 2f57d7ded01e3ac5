import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isCorruptLogError, type CorruptLogError } from '../../src/contracts/errors.js';
import { seal } from '../../src/persistence/checksum.js';
import { openDbs } from '../../src/persistence/journal-recovery.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren } from '../crash/child-util.js';
import { changeByte, readInChild, writeStore } from './fixtures/damage.js';

/**
 * Every record and head the LMDB store writes carries a CRC-32 of its JSON text, checked on every
 * read (src/persistence/checksum.ts): a byte changed on disk is a CorruptLogError naming session
 * and seq, never a changed message read back as the original. The damage here is done to the
 * bytes of data.mdb itself, as a bad sector or a bit flip would.
 */
const dir = tempDirs('actorloop-checksum-', killAllChildren);

async function readError(path: string, sessionId: string): Promise<unknown> {
  const store = lmdbStore({ path });
  try {
    await collect(store.readEvents(sessionId));
    return undefined;
  } catch (e) {
    return e;
  } finally {
    await store.close();
  }
}

describe('record checksums', () => {
  it('a byte changed inside a stored message is a CorruptLogError naming session and seq, for every read path', async () => {
    const path = dir();
    await writeStore(path, { events: 20 });
    changeByte(join(path, 'data.mdb'), 'a-17 x', 5, 'y'); // "a-17 xxx" → "a-17 yxx"
    const e = (await readError(path, 'a')) as CorruptLogError;
    expect(isCorruptLogError(e), String(e)).toBe(true);
    expect({ sessionId: e.sessionId, seq: e.seq }).toEqual({ sessionId: 'a', seq: 17 });
    expect(e.reason).toMatch(/checksum/);
    const store = lmdbStore({ path });
    try {
      await expect(store.loadSurface('a')).rejects.toMatchObject({ code: 'corrupt_log', seq: 17 });
      await expect(collect(store.readEvents('a', { fromSeq: 17, toSeq: 17 }))).rejects.toMatchObject({ code: 'corrupt_log', seq: 17 });
      const id = (await collect(store.readEvents('a', { toSeq: 16 })))[0]!.eventId.replace(/^1-/, '17-');
      await expect(store.getEventById('a', id)).rejects.toMatchObject({ code: 'corrupt_log', seq: 17 });
      expect((await collect(store.readEvents('b'))).length, 'the other session reads cleanly').toBe(20);
    } finally {
      await store.close();
    }
  });

  it('a byte changed inside a head record is a CorruptLogError with seq 0', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    // written through LMDB (the file holds older copies of the head in free pages, so the bytes
    // of the current one are not found by a search): the head's text changed, its seal kept
    const dbs = openDbs(path);
    dbs.env.transactionSync(() => dbs.heads.putSync('b', dbs.heads.get('b')!.replace('"writerEpoch":1', '"writerEpoch":2')));
    await dbs.env.close();
    const store = lmdbStore({ path });
    try {
      await expect(store.getHead('b')).rejects.toMatchObject({
        code: 'corrupt_log',
        sessionId: 'b',
        seq: 0,
        reason: expect.stringMatching(/checksum/),
      });
      await expect(store.attachWriter('b')).rejects.toMatchObject({ code: 'corrupt_log', sessionId: 'b', seq: 0 });
    } finally {
      await store.close();
    }
  });

  it('a record written before checksums (plain JSON) still reads back; the rebuild from the journal seals it', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    const dbs = openDbs(path);
    const sealed = dbs.events.get(['a', 2])!;
    expect(sealed).toMatch(/^#[0-9a-f]{8}\{/);
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 2], sealed.slice(9))); // as an older actorloop stored it
    await dbs.env.close();
    const before = await readInChild(path);
    expect(before.read?.a?.[1]).toBe('2:a-2 ' + 'x'.repeat(40));
    // a restart rebuilds data.mdb from the journal, whose frames hold the plain JSON: sealed again
    expect((await readInChild(path, 'another-boot')).read).toEqual(before.read);
    const after = openDbs(path);
    expect(after.events.get(['a', 2])).toBe(sealed);
    await after.env.close();
  });

  it('a changed byte inside a plain-JSON record (no checksum to catch it) still fails its JSON or schema check where it can', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    const dbs = openDbs(path);
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 2], dbs.events.get(['a', 2])!.slice(9).replace('"seq":2', '"seq":"2"')));
    await dbs.env.close();
    const e = await readError(path, 'a');
    expect(e).toMatchObject({ code: 'corrupt_log', sessionId: 'a', seq: 2 });
  });

  it('reading the surface checks the checksum of every record in its range, the ones off the surface included', async () => {
    const path = dir();
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('a');
    await store.append('a', writerEpoch, 1, [userMsg('one'), stepStart(1, 7), userMsg('three')]);
    await store.close();
    const dbs = openDbs(path);
    // the step/start's text changed, its seal kept (the surface read does not decode it)
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 2], dbs.events.get(['a', 2])!.replace('"step":7', '"step":8')));
    await dbs.env.close();
    const reopened = lmdbStore({ path });
    try {
      await expect(reopened.loadSurface('a')).rejects.toMatchObject({
        code: 'corrupt_log',
        sessionId: 'a',
        seq: 2,
        reason: expect.stringMatching(/checksum/),
      });
    } finally {
      await reopened.close();
    }
  });

  it('the surface read returns exactly the surface records a full read decodes, sealed or plain JSON', async () => {
    const path = dir();
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('a');
    await store.append('a', writerEpoch, 1, [
      userMsg('one'),
      stepStart(1, 1),
      userMsg('three "surfaceOp":"none" in a message'),
      stepStart(1, 2),
      userMsg('five'),
    ]);
    await store.close();
    const dbs = openDbs(path);
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 5], dbs.events.get(['a', 5])!.slice(9))); // written before checksums
    await dbs.env.close();
    const reopened = lmdbStore({ path });
    try {
      const full = (await collect(reopened.readEvents('a'))).filter((e) => e.surfaceOp !== 'none');
      expect(full.map((e) => e.seq)).toEqual([1, 3, 5]);
      expect(await reopened.loadSurface('a')).toEqual(full);
    } finally {
      await reopened.close();
    }
  });

  it('a sealed head written before the fields added later reads back with their defaults', async () => {
    const path = dir();
    await writeStore(path, { events: 2 });
    const dbs = openDbs(path);
    const head = JSON.parse(dbs.heads.get('a')!.slice(9)) as Record<string, unknown>;
    delete head.pendingInputs;
    delete head.heldLocks;
    delete head.stateContextSeq;
    dbs.env.transactionSync(() => dbs.heads.putSync('a', seal(JSON.stringify(head))));
    await dbs.env.close();
    const store = lmdbStore({ path });
    try {
      expect(await store.getHead('a')).toMatchObject({ sessionId: 'a', lastSeq: 2, pendingInputs: [], heldLocks: [], stateContextSeq: 0 });
    } finally {
      await store.close();
    }
  });

  it('the surface read reports a sealed off-surface record stored under another seq, or written in a newer schema version, as a full read does', async () => {
    const path = dir();
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('a');
    await store.append('a', writerEpoch, 1, [userMsg('one'), stepStart(1, 1), userMsg('three'), stepStart(1, 2), userMsg('five')]);
    await store.close();
    const dbs = openDbs(path);
    const step4 = dbs.events.get(['a', 4])!; // sealed, its checksum intact
    const newer = seal(dbs.events.get(['a', 2])!.slice(9).replace('"schemaVersion":"1"', '"schemaVersion":"2"'));
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 3], step4));
    await dbs.env.close();
    let reopened = lmdbStore({ path });
    try {
      await expect(reopened.loadSurface('a')).rejects.toMatchObject({
        code: 'corrupt_log',
        sessionId: 'a',
        seq: 3,
        reason: expect.stringMatching(/wrong key/),
      });
    } finally {
      await reopened.close();
    }
    const again = openDbs(path);
    again.env.transactionSync(() => again.events.putSync(['a', 2], newer));
    await again.env.close();
    reopened = lmdbStore({ path });
    try {
      await expect(reopened.loadSurface('a')).rejects.toMatchObject({ sessionId: 'a', seq: 2, schemaVersion: '2' });
    } finally {
      await reopened.close();
    }
  });
});
