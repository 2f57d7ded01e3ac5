import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import pgDriver from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { judgeHolder, processStartTime } from '../../src/persistence/holders.js';
import { lmdbStore, postgresStore, type EventStore } from '../../src/index.js';
import { freshSchema, postgresForTests, withApplicationName } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';

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

// docs/guarantees.md, One live writer: a PostgreSQL holder is live while its store's lock
// connection holds the advisory lock. That connection can be ended under the store (an idle
// session timeout, a proxy, an admin's pg_terminate_backend): the sessions it holds must not read
// as dead to other processes for longer than it takes to lock again.
const { Client } = pgDriver;

describe('a PostgreSQL holder whose lock connection is ended under it', async () => {
  const pg = await postgresForTests('a PostgreSQL holder whose lock connection is ended (PostgreSQL)');
  afterAll(() => killAllChildren());
  it.runIf(pg !== undefined)("takes a new lock and keeps its sessions held: another process's claim is still refused", async () => {
    const schema = freshSchema('relock');
    const name = `relock-a-${process.pid}`;
    const b = postgresStore({ connectionString: pg!.url, schema });
    await b.holders!.holderOf!('none'); // the schema made before the child uses it
    const holder = spawnTs('test/persistence/holder-child.ts', [withApplicationName(pg!.url, name), schema, 's1']);
    const admin = new Client({ connectionString: pg!.url });
    await admin.connect();
    try {
      await holder.waitFor((l) => l === 'CLAIMED', 20_000, 'the child claimed s1');
      const held = { host: hostname(), pid: holder.proc.pid };
      expect(await b.holders!.holderOf!('s1')).toEqual(held);
      const ended = await admin.query(
        `SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_advisory_lock%'`,
        [name],
      );
      expect(ended.rowCount).toBe(1);
      const gone = async () => (await admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [ended.rows[0].pid])).rowCount === 0;
      while (!(await gone())) await new Promise((r) => setTimeout(r, 20));
      // within a moment the session reads as held again, and a claim from this process is refused
      const until = Date.now() + 5000;
      while ((await b.holders!.holderOf!('s1')) === undefined && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      expect(await b.holders!.claim('s1', { takeover: false })).toEqual(held);
    } finally {
      holder.proc.stdin!.end();
      await holder.waitExit(20_000).catch(() => undefined);
      await admin.end();
      await b.close();
    }
  });
});
