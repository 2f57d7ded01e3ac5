import { hostname } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, isSessionHeldError, lmdbStore, scriptedModel, type EventStore, type SessionHeldError } from '../../src/index.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs, type ChildRun } from './child-util.js';

/**
 * One live writer across processes (docs/guarantees.md, "One live writer"): a session a live
 * child process holds is refused with SessionHeldError naming that process; once the child is
 * SIGKILLed it opens with no flag and no wait; `takeover: true` fences a live holder.
 */
const CHILD = join(REPO_ROOT, 'test/crash/held-child.ts');

interface Backend {
  /** The child's arguments before the session id. */
  childArgs: string[];
  store(): EventStore;
  /** Advisory locks held in the database now (PostgreSQL), to show a refused open holds none. */
  advisoryLocks?(): Promise<number>;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function hold(backend: Backend, sessionId: string, takeover = false): Promise<{ child: ChildRun; epoch: number }> {
  const child = spawnTs(CHILD, [...backend.childArgs, sessionId, ...(takeover ? ['--takeover'] : [])], { label: `holder of ${sessionId}` });
  const line = await child.waitFor((l) => l.startsWith('HELD ') || l.startsWith('REFUSED '), 60_000, 'HELD');
  expect(line, child.describe()).toMatch(/^HELD /);
  return { child, epoch: Number(line.split(' ')[2]) };
}

async function refusal(p: Promise<unknown>): Promise<SessionHeldError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isSessionHeldError(e)) throw new Error(`expected SessionHeldError, got ${String(e)}`);
  return e;
}

function heldAcrossProcesses(backend: () => Backend) {
  it('refuses a session a live process writes with SessionHeldError naming it, and opens it with no flag once that process is SIGKILLed', async () => {
    const b = backend();
    const { child, epoch } = await hold(b, 's1');
    const runtime = createRuntime({ store: b.store(), model: scriptedModel(['x']) });
    cleanups.push(() => runtime.close());
    const locksHeld = await b.advisoryLocks?.();
    const refused = await refusal(runtime.openSession('s1'));
    expect(refused.holder).toEqual({ host: hostname(), pid: child.proc.pid });
    expect(refused.sessionId).toBe('s1');
    if (b.advisoryLocks) expect(await b.advisoryLocks()).toBe(locksHeld); // the refused open holds no lock (nor its connection)
    child.signal('SIGKILL');
    await child.waitExit(10_000);
    const session = await runtime.openSession('s1');
    expect(session.recovery.writerEpoch).toBe(epoch + 1); // the refused open attached nothing
  });

  it('takeover: true opens a session a live process writes, fencing it; the fenced session is not shared', async () => {
    const b = backend();
    const runtime = createRuntime({ store: b.store(), model: scriptedModel(['x']) });
    cleanups.push(() => runtime.close());
    const mine = await runtime.openSession('s2');
    const { child, epoch } = await hold(b, 's2', true);
    expect(epoch).toBe(mine.recovery.writerEpoch + 1);
    // this runtime's session is fenced: not shared, and a new writer is refused (the child holds it)
    const refused = await refusal(runtime.openSession('s2'));
    expect(refused.holder.pid).toBe(child.proc.pid);
    const back = await runtime.openSession('s2', { takeover: true });
    expect(back).not.toBe(mine);
    expect(back.recovery.writerEpoch).toBe(epoch + 1);
  });
}

describe('SessionHeldError across processes on LMDB', () => {
  heldAcrossProcesses(() => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    return { childArgs: ['lmdb', dir.path], store: () => lmdbStore({ path: dir.path }) };
  });
});

const db = await postgresForTests('SessionHeldError across processes on PostgreSQL');
if (db) {
  describe('SessionHeldError across processes on PostgreSQL', () => {
    heldAcrossProcesses(() => {
      const schema = freshSchema('held');
      return {
        childArgs: ['pg', db.url, schema],
        store: () => postgresStore({ connectionString: db.url, schema }),
        async advisoryLocks() {
          const c = new pg.Client({ connectionString: db.url });
          await c.connect();
          try {
            const r = await c.query(
              `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            );
            return (r.rows[0] as { n: number }).n;
          } finally {
            await c.end();
          }
        },
      };
    });
  });
}
