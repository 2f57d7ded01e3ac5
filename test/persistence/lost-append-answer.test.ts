import { afterEach, describe, expect, it } from 'vitest';
import { isLogDivergedError, isStaleWriterError, SequenceConflictError } from '../../src/contracts/errors.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { LogWriter } from '../../src/persistence/log-writer.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { SessionProjection } from '../../src/persistence/projection.js';
import { collect, userMsg } from '../helpers/drafts.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * An append that landed in the store but whose answer was lost (DESIGN §2, docs/event-log.md "An
 * append whose answer is lost"): the writer reads the log to learn what became of it, so it is
 * never wedged behind its own write and never writes it twice. The store is a real LMDB file or a
 * real PostgreSQL server, wrapped so that an append does the real write and then fails.
 */

/** How the next append fails: after the real write (`lost`, `conflict`), or before it (`unwritten`). */
type Fault = 'none' | 'lost' | 'conflict' | 'unwritten';

interface Faulty {
  store: EventStore;
  /** The fault of the next append (then back to 'none'). */
  next: Fault;
  /** While set, getHead and readEvents fail (the server is gone for reads too). */
  unreadable: boolean;
  /** Called after the real write of a faulted append, before it fails (a takeover in between). */
  afterWrite?: () => Promise<unknown>;
  /** Called as getHead answers (a lease running out while the writer reads). */
  onRead?: () => void;
}

const injected = () => new Error('connection terminated after COMMIT (injected)');

function faulty(inner: EventStore): Faulty {
  const f: Faulty = {
    next: 'none',
    unreadable: false,
    store: {
      attachWriter: (id) => inner.attachWriter(id),
      append: async (id, epoch, seq, drafts) => {
        const fault = f.next;
        f.next = 'none';
        if (fault === 'unwritten') throw injected();
        const records = await inner.append(id, epoch, seq, drafts);
        if (fault === 'none') return records;
        await f.afterWrite?.();
        if (fault === 'conflict') throw new SequenceConflictError(id, seq, seq + records.length);
        throw injected();
      },
      readEvents: (id, r) => {
        if (f.unreadable) throw injected();
        return inner.readEvents(id, r);
      },
      loadSurface: (id) => inner.loadSurface(id),
      getHead: async (id) => {
        if (f.unreadable) throw injected();
        const head = await inner.getHead(id);
        f.onRead?.();
        return head;
      },
      getEventById: (id, e) => inner.getEventById(id, e),
      listSessions: () => inner.listSessions(),
      events$: (id, o) => inner.events$(id, o),
      close: () => inner.close(),
    },
  };
  return f;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const db = await postgresForTests('lost append answers on PostgreSQL');
const backends: [string, () => EventStore][] = [
  [
    'LMDB',
    () => {
      const dir = tempDir();
      const store = lmdbStore({ path: dir.path });
      cleanups.push(dir.cleanup, () => store.close());
      return store;
    },
  ],
];
if (db) {
  backends.push([
    'PostgreSQL',
    () => {
      const store = postgresStore({ connectionString: db.url, schema: freshSchema('lost_answer') });
      cleanups.push(() => store.close());
      return store;
    },
  ]);
}

const contents = (log: readonly EventRecord[]) => log.map((e) => (e.payload.message as { content: string }).content);
const at = { turn: 1, step: 1, attempt: 1 };

describe.each(backends)('a lost append answer (%s)', (_, open) => {
  async function writer() {
    const inner = open();
    const f = faulty(inner);
    const { writerEpoch, lastSeq } = await f.store.attachWriter('s');
    const committed: EventRecord[][] = [];
    const projection = new SessionProjection();
    const w = new LogWriter(f.store, 's', writerEpoch, lastSeq + 1, projection, { onCommitted: (r) => committed.push([...r]) });
    return { inner, f, w, writerEpoch, committed, projection };
  }

  it('an append that landed but lost its answer resolves with its records, and the next append goes on without reopening', async () => {
    const { inner, f, w, committed, projection } = await writer();
    f.next = 'lost';
    const first = await w.appendNow([userMsg('one'), userMsg('two')]);
    expect(first.map((e) => e.seq)).toEqual([1, 2]);
    expect(contents(first)).toEqual(['one', 'two']);
    const second = await w.appendNow([userMsg('three')]);
    expect(second.map((e) => e.seq)).toEqual([3]);
    const log = await collect(inner.readEvents('s'));
    expect(contents(log)).toEqual(['one', 'two', 'three']);
    expect(first).toEqual(log.slice(0, 2));
    expect(w.lastSeq).toBe(3);
    expect(committed.map((r) => r.map((e) => e.seq))).toEqual([[1, 2], [3]]);
    expect(projection.surface.messages.map((m) => m.content)).toEqual(['one', 'two', 'three']);
  });

  it('an append refused with a sequence conflict after it landed resolves with its records (its own, read back)', async () => {
    const { inner, f, w } = await writer();
    f.next = 'conflict';
    const first = await w.appendNow([userMsg('one')]);
    expect(first.map((e) => [e.seq, e.type])).toEqual([[1, 'user/message']]);
    await w.appendNow([userMsg('two')]);
    expect(contents(await collect(inner.readEvents('s')))).toEqual(['one', 'two']);
  });

  it('an append whose outcome cannot be read fails with its own error; found in the log later, the writer stops (LogDivergedError) and writes nothing more', async () => {
    // its caller was told it failed and acted so (a run failed over intents that are in fact
    // committed): going on would write on a log the session does not know; a reopen recovers
    const { inner, f, w } = await writer();
    w.stage('user/message', at, { message: { role: 'user', content: 'result' } });
    f.next = 'lost';
    f.unreadable = true;
    await expect(w.commit({ keepOnFailure: true })).rejects.toThrow(/after COMMIT \(injected\)/);
    // still unreadable: the next commit writes nothing (it cannot know where the tail is)
    await expect(w.appendNow([userMsg('input')])).rejects.toThrow(/injected/);
    f.unreadable = false;
    const late = await w.appendNow([userMsg('after')]).catch((e: unknown) => e);
    expect(isLogDivergedError(late), String(late)).toBe(true);
    expect(w.fenced).toBe(true);
    expect(w.mayStartEffect()).toBe(false);
    await expect(w.commit()).rejects.toBe(late);
    expect(contents(await collect(inner.readEvents('s'))), 'nothing written after it').toEqual(['result']);
  });

  it('the lease is asked again after an append in doubt is read back, right before the next write', async () => {
    const { inner, f, w } = await writer();
    const leaseLost = new Error('lease lost');
    let lost = false;
    w.guard = () => (lost ? leaseLost : undefined);
    f.next = 'unwritten'; // fails without proving it wrote nothing, and the log cannot be read then
    f.unreadable = true;
    await expect(w.appendNow([userMsg('one')])).rejects.toThrow(/injected/);
    f.unreadable = false;
    f.onRead = () => (lost = true); // the lease runs out while the writer reads the log back
    await expect(w.appendNow([userMsg('two')])).rejects.toBe(leaseLost);
    expect(contents(await collect(inner.readEvents('s')))).toEqual([]);
    expect(w.mayStartEffect()).toBe(false);
  });

  it('an append that failed before writing is not taken for landed: it fails and the next append takes its seq', async () => {
    const { inner, f, w } = await writer();
    f.next = 'unwritten';
    await expect(w.appendNow([userMsg('never')])).rejects.toThrow(/injected/);
    const next = await w.appendNow([userMsg('one')]);
    expect(next.map((e) => e.seq)).toEqual([1]);
    expect(contents(await collect(inner.readEvents('s')))).toEqual(['one']);
  });

  it('a writer fenced by a newer writer is refused with StaleWriterError, also when its lost append is read back', async () => {
    const { inner, f, w, writerEpoch } = await writer();
    await w.appendNow([userMsg('one')]);
    f.afterWrite = () => inner.attachWriter('s'); // the takeover comes between the write and its lost answer
    f.next = 'lost';
    const lost = await w.appendNow([userMsg('two')]).catch((e: unknown) => e);
    expect(isStaleWriterError(lost), String(lost)).toBe(true);
    expect(w.fenced).toBe(true);
    const again = await w.appendNow([userMsg('three')]).catch((e: unknown) => e);
    expect(isStaleWriterError(again), String(again)).toBe(true);
    const log = await collect(inner.readEvents('s'));
    expect(contents(log)).toEqual(['one', 'two']);
    expect((await inner.getHead('s'))?.writerEpoch).toBe(writerEpoch + 1);
  });

  it('a writer whose epoch another writer took is refused by the store exactly as before', async () => {
    const { inner, w } = await writer();
    await w.appendNow([userMsg('one')]);
    await inner.attachWriter('s');
    const refused = await w.appendNow([userMsg('two')]).catch((e: unknown) => e);
    expect(isStaleWriterError(refused), String(refused)).toBe(true);
    expect(w.fenced).toBe(true);
    expect(w.mayStartEffect()).toBe(false);
    expect(contents(await collect(inner.readEvents('s')))).toEqual(['one']);
  });

  it('records at its own epoch that the writer did not write fail with LogDivergedError and fence it', async () => {
    const { inner, w, writerEpoch } = await writer();
    await inner.append('s', writerEpoch, 1, [userMsg('not mine')]);
    const err = await w.appendNow([userMsg('mine')]).catch((e: unknown) => e);
    expect(isLogDivergedError(err), String(err)).toBe(true);
    expect(err).toMatchObject({ sessionId: 's', writerEpoch, fromSeq: 1, lastSeq: 1 });
    expect(w.fenced).toBe(true);
    expect(w.mayStartEffect()).toBe(false);
    await expect(w.appendNow([userMsg('later')])).rejects.toBe(err);
    expect(contents(await collect(inner.readEvents('s')))).toEqual(['not mine']);
  });
});
