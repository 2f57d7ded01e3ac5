import { readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren } from '../crash/child-util.js';
import { readInChild, segmentFiles, writeStore } from './fixtures/damage.js';

/**
 * data.mdb is checked from outside (src/persistence/data-file.ts) before LMDB maps it: a file
 * cut short under its meta page would otherwise kill the opener with SIGBUS. Missing, empty or
 * cut short while the journal holds frames, it is rebuilt from the journal (the damaged file kept
 * aside); with nothing to rebuild it from, the open is a CorruptLogError. Every read runs in a
 * child process: a regression here kills a process.
 */
const dir = tempDirs('actorloop-datafile-', killAllChildren);

describe('a damaged data.mdb at open', () => {
  for (const [name, damage] of [
    ['cut to half its length', (f: string) => truncateSync(f, Math.floor(statSync(f).size / 2))],
    ['cut to a whole number of pages', (f: string) => truncateSync(f, 5 * 4096)],
    ['emptied', (f: string) => writeFileSync(f, '')],
    ['deleted', (f: string) => rmSync(f)],
  ] as const) {
    it(`${name} while the journal is whole: rebuilt from the journal at open, every event reads back`, async () => {
      const path = dir();
      const expected = await writeStore(path);
      damage(join(path, 'data.mdb'));
      const r = await readInChild(path);
      expect(r.exit, r.stderr).toEqual({ code: 0, signal: null });
      expect(r.read).toEqual(expected);
      if (name !== 'deleted')
        expect(
          readdirSync(path).some((f) => f.startsWith('data.mdb.damaged-')),
          'the damaged file is kept aside',
        ).toBe(true);
    });
  }

  it('cut short in a store without a journal (durability committed): a CorruptLogError naming data.mdb, no crash', async () => {
    const path = dir();
    const { lmdbStore } = await import('../../src/persistence/lmdb-store.js');
    const store = lmdbStore({ path, durability: 'committed' });
    const { writerEpoch } = await store.attachWriter('s');
    for (let i = 1; i <= 40; i++)
      await store.append('s', writerEpoch, i, [{ type: 'step/start', turn: 1, step: i, attempt: 1, surfaceOp: 'none', payload: {} }]);
    await store.close();
    truncateSync(join(path, 'data.mdb'), 4096 * 3);
    const r = await readInChild(path);
    expect(r.exit.signal).toBeNull();
    expect(r.error).toMatchObject({
      code: 'corrupt_log',
      reason: expect.stringMatching(/data\.mdb .*cut short.*no journal to rebuild it from/),
    });
  });

  it('cut short while the journal is cut short too: a CorruptLogError naming both, and nothing is moved', async () => {
    const path = dir();
    await writeStore(path, { size: 6000 });
    truncateSync(join(path, 'data.mdb'), 4096 * 7);
    truncateSync(segmentFiles(path)[0]!, 10_000);
    const r = await readInChild(path);
    expect(r.exit.signal).toBeNull();
    expect(r.error).toMatchObject({ code: 'corrupt_log' });
    expect(r.error!.reason).toMatch(/data\.mdb .*cut short/);
    expect(r.error!.reason).toMatch(/0000000001\.wal is 10000 bytes/);
    expect(readdirSync(path).filter((f) => f.startsWith('data.mdb'))).toEqual(['data.mdb']);
  });
});
