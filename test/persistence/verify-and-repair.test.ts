import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lmdbStore, repairStore, verifyStore } from '../../src/index.js';
import { seal } from '../../src/persistence/checksum.js';
import { openDbs, readState } from '../../src/persistence/journal-recovery.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren } from '../crash/child-util.js';
import { changeByte, flipBits, flipPagesHolding, readInChild, segmentFiles, writeStore } from './fixtures/damage.js';

/**
 * `verifyStore` walks every record and the journal in a child process and resolves with a typed
 * report, also when LMDB kills that child (damaged B-tree pages make it assert or fault, which
 * no process survives); `repairStore` rebuilds what is damaged from what is whole. The damage is
 * done to the files' bytes; every read of damaged pages happens in a child process.
 */
const dir = tempDirs('actorloop-verify-', killAllChildren);

const PAGE = 4096;

describe('verifyStore', () => {
  it('reports { ok: true } and what it checked for a sound store, and changes nothing', async () => {
    const path = dir();
    await writeStore(path, { events: 30 });
    const files = readdirSync(path).sort();
    const report = await verifyStore(path);
    expect(report).toMatchObject({ ok: true, checked: { sessions: 2, events: 60 } });
    expect(readdirSync(path).sort()).toEqual(files);
  });

  it('names session and seq of a record whose bytes changed', async () => {
    const path = dir();
    await writeStore(path, { events: 30 });
    changeByte(join(path, 'data.mdb'), 'b-21 x', 5, 'z');
    const report = await verifyStore(path);
    expect(report).toMatchObject({
      ok: false,
      problems: [{ where: 'data.mdb', sessionId: 'b', seq: 21, reason: expect.stringMatching(/checksum/) }],
    });
  });

  it('names a sealed record whose checksum matches but whose payload fails its schema (a writer bug, not damage)', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    const dbs = openDbs(path);
    const rec = JSON.parse(dbs.events.get(['a', 2])!.slice(9)) as { payload: unknown };
    rec.payload = { message: { role: 'wizard', content: 'x' } };
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 2], seal(JSON.stringify(rec))));
    await dbs.env.close();
    const report = await verifyStore(path);
    expect(report).toMatchObject({
      ok: false,
      problems: [{ where: 'data.mdb', sessionId: 'a', seq: 2, reason: expect.stringMatching(/user\/message/) }],
    });
  });

  it('reports a sealed record of a type a newer actorloop added at `version`, not as damage; repair refuses and changes nothing', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    const dbs = openDbs(path);
    const rec = JSON.parse(dbs.events.get(['a', 2])!.slice(9)) as { type: string };
    rec.type = 'future/thing';
    dbs.env.transactionSync(() => dbs.events.putSync(['a', 2], seal(JSON.stringify(rec))));
    await dbs.env.close();
    const report = await verifyStore(path);
    expect(report).toMatchObject({
      ok: false,
      problems: [{ where: 'version', sessionId: 'a', seq: 2, reason: expect.stringMatching(/newer actorloop wrote it/) }],
    });
    const files = readdirSync(path).sort();
    await expect(repairStore(path)).rejects.toThrow(/written by a newer actorloop.*nothing was changed/);
    expect(readdirSync(path).sort()).toEqual(files);
  });

  it('names a journal segment that is missing', async () => {
    const path = dir();
    await writeStore(path, { size: 6000 });
    const { rmSync } = await import('node:fs');
    rmSync(segmentFiles(path)[1]!);
    const report = await verifyStore(path);
    expect(report.ok).toBe(false);
    expect(!report.ok && report.problems).toContainEqual(
      expect.objectContaining({ where: 'journal/0000000002.wal', reason: expect.stringMatching(/missing/) }),
    );
  });

  it('names frames missing from the end of the journal (fewer than the store recorded), and repair writes the journal again from data.mdb', async () => {
    const path = dir();
    const expected = await writeStore(path, { events: 20 });
    const dbs = openDbs(path);
    const state = readState(dbs, path);
    await dbs.env.close();
    const { openSync, writeSync, closeSync } = await import('node:fs');
    const fd = openSync(segmentFiles(path)[state.segment - 1]!, 'r+');
    writeSync(fd, Buffer.alloc(1500), 0, 1500, state.offset - 1500); // the last few frames' bytes gone
    closeSync(fd);
    const report = await verifyStore(path);
    expect(!report.ok && report.problems).toContainEqual(
      expect.objectContaining({ where: 'journal', reason: expect.stringMatching(/store recorded frames up to \d+: frames are missing/) }),
    );
    const { repaired, after } = await repairStore(path);
    expect({ repaired, ok: after.ok }).toEqual({ repaired: true, ok: true });
    expect((await readInChild(path, 'after-restart')).read, 'the new journal alone rebuilds the log').toEqual(expected);
  });

  it('a B-tree page with a flipped flag kills a reader by a signal; verify reports that death as a problem, and repair restores every event', async () => {
    const path = dir();
    const expected = await writeStore(path);
    flipPagesHolding(join(path, 'data.mdb'), 'b-40 x', 18, 0x02); // the flags of the leaf holding b#40: a leaf read as a branch
    const reader = await readInChild(path);
    expect(reader.exit.signal, 'LMDB asserts: no process survives this page').not.toBeNull();
    const report = await verifyStore(path);
    expect(report.ok).toBe(false);
    expect(!report.ok && report.problems[0]).toMatchObject({
      where: 'data.mdb',
      reason: expect.stringMatching(/killed by SIG[A-Z]+ while reading/),
    });
    const { repaired, actions, after } = await repairStore(path);
    expect({ repaired, after }).toMatchObject({ repaired: true, after: { ok: true, checked: { events: 160 } } });
    expect(actions[0]).toMatch(/moved the damaged data\.mdb aside to .*data\.mdb\.damaged-/);
    const back = await readInChild(path);
    expect(back.exit.code, back.stderr).toBe(0);
    expect(back.read).toEqual(expected);
  });

  it('a zeroed B-tree page: verify names it or the death it causes, and repair restores every event', async () => {
    const path = dir();
    const expected = await writeStore(path);
    const { openSync, writeSync, closeSync } = await import('node:fs');
    const fd = openSync(join(path, 'data.mdb'), 'r+');
    writeSync(fd, Buffer.alloc(PAGE), 0, PAGE, 5 * PAGE);
    closeSync(fd);
    expect((await verifyStore(path)).ok).toBe(false);
    expect((await repairStore(path)).after.ok).toBe(true);
    expect((await readInChild(path)).read).toEqual(expected);
  });

  it('a page header flip that LMDB itself detects reads as a typed error naming the session, not a raw MDB_ error', async () => {
    const path = dir();
    await writeStore(path);
    flipBits(join(path, 'data.mdb'), 3 * PAGE + 24, 0x08); // the first node offset of page 3
    const r = await readInChild(path);
    expect(r.exit.signal).toBeNull();
    expect(r.error?.code).toMatch(/^(corrupt_log|store)$/);
    expect(r.error?.reason).toMatch(/MDB_[A-Z_]+/);
    expect(r.error?.sessionId).toBe('a');
  });

  it('refuses to repair when both data.mdb and the journal are damaged, changing nothing', async () => {
    const path = dir();
    await writeStore(path, { size: 6000 });
    changeByte(join(path, 'data.mdb'), 'a-3 x', 4, 'q');
    const { truncateSync } = await import('node:fs');
    truncateSync(segmentFiles(path)[0]!, 1000);
    const files = readdirSync(path).sort();
    await expect(repairStore(path)).rejects.toMatchObject({
      code: 'corrupt_log',
      reason: expect.stringMatching(/both data\.mdb .* and the journal .* are damaged/),
    });
    expect(readdirSync(path).sort()).toEqual(files);
  });

  it('refuses to repair a damaged data.mdb of a store without a journal (durability committed), changing nothing', async () => {
    const path = dir();
    const store = lmdbStore({ path, durability: 'committed' });
    const { writerEpoch } = await store.attachWriter('a');
    for (let i = 1; i <= 5; i++)
      await store.append('a', writerEpoch, i, [
        {
          type: 'user/message',
          turn: 1,
          step: 1,
          attempt: 1,
          surfaceOp: 'append',
          payload: { message: { role: 'user', content: `a-${i} ${'x'.repeat(6000)}` } },
        },
      ]);
    await store.close();
    changeByte(join(path, 'data.mdb'), 'a-3 x', 4, 'q');
    const files = readdirSync(path).sort();
    await expect(repairStore(path)).rejects.toMatchObject({
      code: 'corrupt_log',
      reason: expect.stringMatching(/no journal .* nothing to rebuild it from/),
    });
    expect(readdirSync(path).sort()).toEqual(files);
  });

  it('a store that needs nothing is not repaired', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    expect(await repairStore(path)).toMatchObject({ repaired: false, actions: [], after: { ok: true } });
  });

  it('needs a temp dir for its copy of data.mdb: a TMPDIR that cannot hold one is a StoreError naming it, and nothing is changed', async () => {
    const path = dir();
    await writeStore(path, { events: 3 });
    const files = readdirSync(path).sort();
    const missing = join(dir(), 'no-such-dir');
    const before = process.env.TMPDIR;
    process.env.TMPDIR = missing;
    try {
      await expect(verifyStore(path)).rejects.toMatchObject({
        code: 'store',
        where: missing,
        reason: expect.stringMatching(/temp dir for a copy of data\.mdb/),
      });
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
    }
    expect(readdirSync(path).sort()).toEqual(files);
  });

  it('bad input is a ValidationError or a StoreError naming the path', async () => {
    await expect(verifyStore('')).rejects.toMatchObject({ code: 'validation' });
    await expect(verifyStore(join(dir(), 'nope'))).rejects.toMatchObject({ code: 'store' });
    await expect(verifyStore(dir(), { timeoutMs: -1 })).rejects.toMatchObject({ code: 'validation' });
  });
});
