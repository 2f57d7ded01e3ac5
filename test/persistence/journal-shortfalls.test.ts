import { readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isStoreError } from '../../src/contracts/errors.js';
import { openDbs } from '../../src/persistence/journal-recovery.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { repairStore } from '../../src/persistence/verify.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren } from '../crash/child-util.js';
import { readInChild, segmentFiles, writeStore } from './fixtures/damage.js';

/**
 * Only the last journal frame can be torn (each is flushed before the next is written): after a
 * restart it is dropped. Every other shortfall of the journal — a segment missing or cut short,
 * a gap in frame numbers — is a CorruptLogError naming it, never a shorter log; a segment removed
 * under an open store fails the next commit with a StoreError, and nothing is committed.
 * A restart is simulated with another boot id (docs/event-log.md, "Durability").
 */
const dir = tempDirs('actorloop-shortfall-', killAllChildren);

/** 2 × 20 events of ~25 KB: three segments (256 KiB, 512 KiB, 1 MiB). */
async function threeSegments(path: string) {
  const expected = await writeStore(path, { events: 20, size: 25_000 });
  expect(segmentFiles(path).map((f) => f.slice(-14))).toEqual(['0000000001.wal', '0000000002.wal', '0000000003.wal']);
  return expected;
}

describe('journal shortfalls after a restart', () => {
  for (const n of [1, 2, 3]) {
    it(`segment ${n} of 3 deleted: a CorruptLogError naming it, never a shorter log`, async () => {
      const path = dir();
      await threeSegments(path);
      rmSync(segmentFiles(path)[n - 1]!);
      const r = await readInChild(path, 'after-restart');
      expect(r.exit.signal).toBeNull();
      expect(r.read).toBeUndefined();
      expect(r.error).toMatchObject({ code: 'corrupt_log', sessionId: `journal 000000000${n}.wal` });
      expect(r.error!.reason).toMatch(new RegExp(`000000000${n}\\.wal is missing`));
    });
  }

  it('a segment cut short: a CorruptLogError naming it and its length', async () => {
    const path = dir();
    await threeSegments(path);
    truncateSync(segmentFiles(path)[1]!, 100_000);
    const r = await readInChild(path, 'after-restart');
    expect(r.error).toMatchObject({
      code: 'corrupt_log',
      sessionId: 'journal 0000000002.wal',
      reason: expect.stringMatching(/100000 bytes.*cut short/),
    });
  });

  it('a frame in the middle that fails its check (a gap in frame numbers): a CorruptLogError, nothing dropped', async () => {
    const path = dir();
    await threeSegments(path);
    const seg = segmentFiles(path)[0]!;
    const buf = readFileSync(seg);
    buf[30_000] = buf[30_000]! ^ 0xff; // inside some frame of segment 1
    writeFileSync(seg, buf);
    const r = await readInChild(path, 'after-restart');
    expect(r.error).toMatchObject({ code: 'corrupt_log', reason: expect.stringMatching(/does not check out, but frame \d+ follows/) });
    expect(segmentFiles(path)).toHaveLength(3);
  });

  it('a torn last frame is dropped, and only it', async () => {
    const path = dir();
    const expected = await threeSegments(path);
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('b');
    await store.append('b', writerEpoch, 21, [{ type: 'step/start', turn: 1, step: 2, attempt: 1, surfaceOp: 'none', payload: {} }]);
    await store.close();
    // the last frame (the append above) torn: its last byte never reached the disk
    const seg = segmentFiles(path)[2]!;
    const buf = readFileSync(seg);
    let end = buf.length - 1;
    while (buf[end] === 0) end--;
    buf[end] = 0;
    writeFileSync(seg, buf);
    const r = await readInChild(path, 'after-restart');
    expect(r.exit.code, r.stderr).toBe(0);
    expect(r.read).toEqual(expected); // the attach's frame came before the torn one and stays
  });
});

describe('journal shortfalls under the same boot', () => {
  it('a segment deleted while the store is closed: the next open names it, and repair writes the journal again from data.mdb', async () => {
    const path = dir();
    const expected = await threeSegments(path);
    rmSync(segmentFiles(path)[2]!);
    const r = await readInChild(path);
    expect(r.error).toMatchObject({ code: 'corrupt_log', sessionId: 'journal 0000000003.wal', reason: expect.stringMatching(/missing/) });
    const { repaired, actions, after } = await repairStore(path);
    expect({ repaired, ok: after.ok }).toEqual({ repaired: true, ok: true });
    expect(actions.join('\n')).toMatch(/journal aside.*\n.*new journal/);
    expect((await readInChild(path)).read).toEqual(expected);
    expect((await readInChild(path, 'after-restart')).read, 'the new journal alone rebuilds the log').toEqual(expected);
  });

  for (const what of ['the current segment', 'the journal directory'] as const) {
    it(`${what} removed under an open store: the next commit fails with a StoreError and commits nothing`, async () => {
      const path = dir();
      await writeStore(path, { events: 5 });
      const store = lmdbStore({ path });
      const { writerEpoch } = await store.attachWriter('a');
      if (what === 'the journal directory')
        renameSync(join(path, 'journal'), join(path, 'journal.gone')), rmSync(join(path, 'journal.gone'), { recursive: true });
      else rmSync(segmentFiles(path)[0]!);
      const e = await store
        .append('a', writerEpoch, 6, [{ type: 'step/start', turn: 1, step: 2, attempt: 1, surfaceOp: 'none', payload: {} }])
        .then(
          () => undefined,
          (x: unknown) => x,
        );
      expect(isStoreError(e), String(e)).toBe(true);
      expect((e as Error).message).toMatch(/removed while the store was open|could not be written/);
      await store.close();
      const dbs = openDbs(path);
      expect(JSON.parse(dbs.heads.get('a')!.slice(9)).lastSeq, 'nothing was committed').toBe(5);
      await dbs.env.close();
    });
  }
});
