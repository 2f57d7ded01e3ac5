import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { lmdbStore } from '../../src/index.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { childOpen } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
function dir(): string {
  const d = tempDir('actorloop-third-look-');
  cleanups.push(d.cleanup);
  return d.path;
}

function tryOpen(path: string, bootId: string): { store?: ReturnType<typeof lmdbStore>; error?: unknown } {
  try {
    return { store: lmdbStore({ path, bootId }) };
  } catch (error) {
    return { error };
  }
}

async function committedStore(path: string): Promise<void> {
  const old = lmdbStore({ path, durability: 'committed' });
  const { writerEpoch } = await old.attachWriter('c');
  await old.append('c', writerEpoch, 1, [userMsg('before the journal'), stepStart()]);
  await old.close();
}

describe('journal migration and group commit (real LMDB)', () => {
  it(
    'journal: a migration whose BOOT write fails (disk full) after its LMDB transaction is redone at the next open, not refused as a lost journal',
    async () => {
      const path = dir();
      await committedStore(path);
      // the first 'flushed' open migrates; the disk fills up while it writes journal.new/BOOT
      // (after the write transaction that copied the store and recorded the journal state)
      const child = childOpen(
        path,
        'boot-1',
        `const real = fs.writeFileSync;
fs.writeFileSync = (file, ...rest) => {
  if (String(file).includes('journal.new') && String(file).includes('BOOT')) { const e = new Error('ENOSPC: no space left on device, write'); e.code = 'ENOSPC'; throw e; }
  return real(file, ...rest);
};`,
      );
      expect(child.stdout, child.stderr).toContain('FAILED ENOSPC');
      expect(existsSync(join(path, 'journal'))).toBe(false);

      // space freed: the store was never journaled by anyone but this failed migration, so opening
      // it again must redo the migration (it is the same situation as a migration killed there)
      const { store, error } = tryOpen(path, 'boot-1');
      cleanups.push(async () => void (await store?.close()));
      expect(error === undefined ? 'opened' : `refused: ${String((error as Error).message)}`).toBe('opened');
      expect((await collect(store!.readEvents('c'))).map((e) => e.seq)).toEqual([1, 2]);
    },
    scaled(90_000),
  );

  it(
    'journal: a refused open leaves no staging that lets the next open adopt a store whose journal is lost',
    async () => {
      const path = dir();
      // a journaled store ('flushed'), then its journal directory is lost
      const s = lmdbStore({ path, bootId: 'boot-1' });
      const { writerEpoch } = await s.attachWriter('c');
      await s.append('c', writerEpoch, 1, [userMsg('journaled'), stepStart()]);
      await s.close();
      rmSync(join(path, 'journal'), { recursive: true, force: true });

      // an open is refused (as it must be); the journal.new it staged stays behind (as after a
      // kill): it must not pass for an interrupted migration (its nonce is not the one in LMDB)
      const first = tryOpen(path, 'boot-2');
      expect((first.error as Error | undefined)?.name).toBe('CorruptLogError');
      expect(existsSync(join(path, 'journal.new', 'MIGRATION'))).toBe(true);

      // nothing was migrated: the journal is still lost and the store must still be refused
      const { store, error } = tryOpen(path, 'boot-2');
      cleanups.push(async () => void (await store?.close()));
      expect(error === undefined ? 'adopted (journal silently recreated)' : (error as Error).name).toBe('CorruptLogError');
    },
    scaled(90_000),
  );

  it('group commit: an append resolves under fake timers (vi.useFakeTimers() defaults): the drain uses node:timers own setImmediate', async () => {
    const path = dir();
    const store = lmdbStore({ path, durability: 'committed' });
    cleanups.push(async () => store.close());
    const { writerEpoch } = await store.attachWriter('s');
    const realSetTimeout = globalThis.setTimeout;
    // an application testing its approval timeouts with fake timers (a common setup)
    vi.useFakeTimers();
    try {
      const outcome = await Promise.race([
        store.append('s', writerEpoch, 1, [userMsg('hello')]).then(() => 'committed'),
        new Promise<string>((resolve) => realSetTimeout(() => resolve('still waiting after 2 s'), 2000)),
      ]);
      expect(outcome).toBe('committed');
    } finally {
      vi.runOnlyPendingTimers(); // lets the stuck drain go before the store closes
      vi.useRealTimers();
    }
  });
});

describe('journal migration nonce', () => {
  it(
    'a redone migration killed during its copy (after writing its own nonce) is redone again, not refused as a lost journal',
    async () => {
      const path = dir();
      const old = lmdbStore({ path, durability: 'committed' });
      const { writerEpoch } = await old.attachWriter('c');
      await old.append('c', writerEpoch, 1, [userMsg('before the journal'), stepStart()]);
      await old.close();

      // 1st migration: its transaction commits (state + nonce N1 in LMDB), then BOOT fails
      const first = childOpen(
        path,
        'boot-1',
        `const real = fs.writeFileSync;
fs.writeFileSync = (file, ...rest) => {
  if (String(file).includes('journal.new') && String(file).includes('BOOT')) { const e = new Error('ENOSPC'); e.code = 'ENOSPC'; throw e; }
  return real(file, ...rest);
};`,
      );
      expect(first.stdout, first.stderr).toContain('FAILED ENOSPC');

      // 2nd open redoes it: it writes a fresh nonce N2 to journal.new/MIGRATION, then the process is
      // killed while it copies the store into the staged journal (before its transaction commits)
      const second = childOpen(
        path,
        'boot-1',
        `const realOpen = fs.openSync, realWrite = fs.writeSync, realExists = fs.existsSync;
const staged = new Set();
fs.openSync = (file, ...rest) => { const fd = realOpen(file, ...rest); if (String(file).includes('journal.new')) staged.add(fd); return fd; };
fs.writeSync = (fd, ...rest) => {
  if (staged.has(fd) && realExists(${JSON.stringify(join(path, 'journal.new', 'MIGRATION'))})) process.kill(process.pid, 'SIGKILL');
  return realWrite(fd, ...rest);
};`,
      );
      expect(second.signal, second.stdout + second.stderr).toBe('SIGKILL');
      expect(existsSync(join(path, 'journal'))).toBe(false);

      // nothing but migrations ever touched this store: the next open must redo it
      const { store, error } = tryOpen(path, 'boot-1');
      cleanups.unshift(async () => void (await store?.close()));
      expect(error === undefined ? 'opened' : `refused: ${String((error as Error).message)}`).toBe('opened');
      expect((await collect(store!.readEvents('c'))).map((e) => e.seq)).toEqual([1, 2]);
    },
    scaled(120_000),
  );
});

describe('journal: adopting a store without one', () => {
  it(
    'a migration killed after its LMDB transaction committed (before journal.new became journal/) is redone, not refused as a lost journal',
    async () => {
      const path = dir();
      await committedStore(path);
      // A real process opens it 'flushed' and is SIGKILLed during the migration, after the LMDB
      // write transaction that copied the store and recorded the journal state committed, while it
      // writes journal.new/BOOT (before journal.new/ is renamed to journal/).
      const child = childOpen(
        path,
        'boot-1',
        `const real = fs.writeFileSync;
fs.writeFileSync = (file, ...rest) => {
  if (String(file).includes('journal.new') && String(file).includes('BOOT')) process.kill(process.pid, 'SIGKILL');
  return real(file, ...rest);
};`,
      );
      expect(child.signal, child.stdout + child.stderr).toBe('SIGKILL');
      expect(existsSync(join(path, 'journal.new'))).toBe(true);
      expect(existsSync(join(path, 'journal'))).toBe(false);
      // "an interrupted migration is simply redone"
      const { store, error } = tryOpen(path, 'boot-1');
      cleanups.unshift(async () => void (await store?.close()));
      expect(error === undefined ? 'opened' : `refused: ${String((error as Error).message)}`).toBe('opened');
      expect((await collect(store!.readEvents('c'))).map((e) => e.seq)).toEqual([1, 2]);
    },
    scaled(90_000),
  );
});
