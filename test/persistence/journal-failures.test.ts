import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { Journal } from '../../src/persistence/journal.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren, REPO_ROOT, spawnTs } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';

/**
 * Failures and misuse of the LMDB store's journal (docs/event-log.md, "Durability", "When the LMDB file is
 * trusted, and the rebuild", "LMDB and several processes"). A machine restart is simulated as in
 * journal.test.ts: data.mdb overwritten with garbage and a new `bootId`.
 */

const CHILD = join(REPO_ROOT, 'test/crash/journal-failures-child.ts');

const dir = tempDirs('actorloop-journal-failures-', async () => {
  vi.restoreAllMocks();
  await killAllChildren();
});

const trash = (path: string) => writeFileSync(join(path, 'data.mdb'), randomBytes(128 * 1024));

async function dump(path: string, bootId: string): Promise<Record<string, EventRecord[]>> {
  const store = lmdbStore({ path, bootId });
  try {
    const out: Record<string, EventRecord[]> = {};
    for (const s of (await store.listSessions()).sort()) out[s] = await collect(store.readEvents(s));
    return out;
  } finally {
    await store.close();
  }
}

/** Runs the child asynchronously (a real second process) and returns its stdout lines. */
function runChild(args: string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { cwd: REPO_ROOT, env: { ...process.env, NODE_OPTIONS: '' } });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    c.on('error', reject);
    c.on('exit', () => (out || !err ? resolve(out.split('\n').filter(Boolean)) : reject(new Error(err))));
  });
}

describe('LMDB store journal: failures and misuse', () => {
  it(
    'an append rejected because its frame flush failed (EIO) does not come back in a rebuild',
    async () => {
      const path = dir();
      const child = spawnTs(CHILD, ['eio-append', path, 'boot-1'], { label: 'eio-append' });
      expect((await child.waitExit(60_000)).code, child.describe()).toBe(0);
      // the caller of the second append was told it failed …
      expect(child.lines).toEqual(['ACK s 1 1 ok-1', 'REJECTED StoreError EIO']);
      // … and under the same boot the log indeed holds only the first one
      expect((await dump(path, 'boot-1')).s!.map((e) => e.eventId)).toEqual(['ok-1']);
      // after a machine restart, the failed append must not be resurrected from its frame
      trash(path);
      expect((await dump(path, 'boot-2')).s!.map((e) => e.eventId)).toEqual(['ok-1']);
    },
    scaled(90_000),
  );

  it(
    "a 'committed' writer's commit made while a 'flushed' open migrates the store is not lost from the journal (the rebuilt log stays readable)",
    async () => {
      const path = dir();
      // a store without a journal, as a 'committed' writer (or an older actorloop) leaves it
      const old = lmdbStore({ path, durability: 'committed' });
      const { writerEpoch } = await old.attachWriter('c');
      await old.append('c', writerEpoch, 1, [userMsg('before the journal'), stepStart()]);
      await old.close();

      // While the first 'flushed' open migrates the store, another process still in 'committed'
      // mode tries to commit an append. The hook only fixes the timing (it holds the migration for
      // 2.5 s, long enough for the child to start and reach LMDB's writer lock); the second process
      // is real and commits through LMDB's lock. The migration holds that lock, so the child either
      // commits before the journal's state exists (its events are then copied) or after (refused).
      const realWrite = Journal.prototype.write;
      let child: Promise<string[]> | undefined;
      vi.spyOn(Journal.prototype, 'write').mockImplementation(function (this: Journal, ...args) {
        if (!child && this.dir.endsWith('journal.new')) {
          child = runChild(['append', path, 'c', 'boot-1', 'committed']);
          const end = Date.now() + 2500;
          while (Date.now() < end) {
            // hold the migration (and LMDB's writer lock) while the child starts
          }
        }
        return realWrite.apply(this, args);
      });
      const flushed = lmdbStore({ path, bootId: 'boot-1' });
      vi.restoreAllMocks();
      const childLines = await child!;
      expect(childLines).toEqual([expect.stringMatching(/^(ACK c 3 4 |ERROR ValidationError .*journal)/)]);
      const committedByChild = childLines[0]!.startsWith('ACK');

      // the 'flushed' store goes on with the session: its append is acknowledged (flushed)
      const att = await flushed.attachWriter('c');
      const tail = committedByChild ? 4 : 2;
      expect(att.lastSeq).toBe(tail);
      await flushed.append('c', att.writerEpoch, tail + 1, [userMsg('flushed, acknowledged'), stepStart()]);
      await flushed.close();
      const before = await dump(path, 'boot-1');
      expect(before.c!.map((e) => e.seq)).toEqual(Array.from({ length: tail + 2 }, (_, i) => i + 1));

      // machine restart: the log rebuilt from the journal must be the log that was acknowledged
      trash(path);
      expect(await dump(path, 'boot-2')).toEqual(before);
    },
    scaled(90_000),
  );

  it(
    'a journaled store whose journal directory was deleted is refused with a CorruptLogError, never adopted as if it had none',
    async () => {
      const path = dir();
      const a = lmdbStore({ path, bootId: 'boot-1' });
      const { writerEpoch } = await a.attachWriter('a');
      await a.append('a', writerEpoch, 1, [userMsg('a1'), stepStart()]);
      rmSync(join(path, 'journal'), { recursive: true }); // by hand
      // another process opens the path (same boot): adopting data.mdb as a fresh journal would
      // hide that the frames are gone (and a later rebuild would lose what the first store adds)
      const refused = spawnSync(process.execPath, ['--import', 'tsx', CHILD, 'append', path, 'b', 'boot-1', 'flushed'], {
        cwd: REPO_ROOT,
        env: { ...process.env, NODE_OPTIONS: '' },
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(refused.stdout).toMatch(/ERROR CorruptLogError .*journal directory .* is missing/);
      await a.close();
      // after a machine restart too (a new boot id): a typed error naming the missing journal
      expect(() => lmdbStore({ path, bootId: 'boot-2' })).toThrow(/journal directory .* is missing/);
      expect(existsSync(join(path, 'journal'))).toBe(false);
    },
    scaled(90_000),
  );
});
