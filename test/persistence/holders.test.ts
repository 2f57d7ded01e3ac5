import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { judgeHolder, processStartTime } from '../../src/persistence/holders.js';
import { lmdbStore, postgresStore, type EventStore } from '../../src/index.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';

// How a recorded holder is judged on this machine (docs/guarantees.md, "One live writer"): by the
// process table, with the process's start time telling a reused pid from the holder.

describe.runIf(process.platform === 'linux')('judging a recorded holder (Linux)', () => {
  it('a live process with the recorded start time is live; the same pid with another start time is a reused pid: dead', async () => {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      const pid = child.pid!;
      const startTime = processStartTime(pid);
      expect(startTime).toMatch(/^\d+$/);
      expect(judgeHolder({ host: hostname(), pid, startTime })).toBe('live');
      expect(judgeHolder({ host: hostname(), pid, startTime: String(Number(startTime) - 1) })).toBe('dead');
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(judgeHolder({ host: hostname(), pid, startTime })).toBe('dead');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('this process is same-process; a holder on another host is taken as live unless the store says otherwise', () => {
    const startTime = processStartTime(process.pid)!;
    expect(judgeHolder({ host: hostname(), pid: process.pid, startTime })).toBe('same-process');
    expect(judgeHolder({ host: `not-${hostname()}`, pid: 1 })).toBe('live');
    expect(judgeHolder({ host: `not-${hostname()}`, pid: 1 }, false)).toBe('dead');
  });
});

// `holderOf` reads the holder without claiming (the read-only `actorloop recover` names a live
// process running the session); its answer is the one a claim would be refused with.
describe('reading the holder of a session', async () => {
  const pg = await postgresForTests('reading the holder of a session (PostgreSQL)');
  const dir = tempDir('actorloop-holders-');
  afterAll(() => dir.cleanup());
  const stores: [string, () => EventStore][] = [
    ['lmdb', () => lmdbStore({ path: dir.path })],
    ...(pg
      ? [['postgres', () => postgresStore({ connectionString: pg.url, schema: freshSchema('holders') })] as [string, () => EventStore]]
      : []),
  ];
  it.each(stores)('%s: holderOf names a live claim without recording one, and nothing once it is released', async (_, open) => {
    const store = open();
    try {
      expect(await store.holders!.holderOf!('s1')).toBeUndefined();
      expect(await store.holders!.claim('s1', { takeover: false, workerId: 'w1' })).toBeUndefined();
      expect(await store.holders!.holderOf!('s1')).toEqual({ host: hostname(), pid: process.pid, workerId: 'w1' });
      expect(await store.holders!.holderOf!('s2')).toBeUndefined();
      await store.holders!.release('s1');
      expect(await store.holders!.holderOf!('s1')).toBeUndefined();
    } finally {
      await store.close();
    }
  });
});
