import type { Database, RootDatabase } from 'lmdb';
import { CorruptLogError } from '../contracts/errors.js';
import { StoredInboxEntry } from '../contracts/inbox.js';
import type { LmdbTxn } from './lmdb-txn.js';
import { KvWorkStore } from './work-kv.js';
import type { WorkerRow, WorkRow, WorkTxn } from './work-core.js';

export interface WorkDbs {
  env: RootDatabase;
  inbox: Database<string, string[]>;
  work: Database<string, string>;
  workers: Database<string, string>;
}

function parse<T>(raw: string | undefined, what: string, sessionId: string): T | undefined {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw) as T;
  } catch (e) {
    throw new CorruptLogError(sessionId, 0, `${what} is unreadable: ${(e as Error).message}`);
  }
}

/** Reads (and, given the store's write transaction, writes) the inbox and work databases. */
function workTxn(
  dbs: WorkDbs,
  txn: LmdbTxn | undefined,
  log: { writerEpoch(sid: string): number; hasEvent(sid: string, id: string): boolean },
): WorkTxn {
  const writable = () => {
    if (!txn) throw new Error('read-only work view');
    txn.dirty = true;
    return txn;
  };
  return {
    work: (sid) => parse<WorkRow>(dbs.work.get(sid), 'work row', sid),
    *allWork() {
      for (const { key, value } of dbs.work.getRange()) yield parse<WorkRow>(value, 'work row', String(key))!;
    },
    putWork: (row) => {
      const t = writable();
      const text = JSON.stringify(row);
      dbs.work.putSync(row.sessionId, text);
      t.frame?.aux('work', row.sessionId, text);
    },
    entry: (sid, id) => {
      const e = parse<unknown>(dbs.inbox.get([sid, id]), `inbox entry ${id}`, sid);
      if (e === undefined) return undefined;
      const p = StoredInboxEntry.safeParse(e);
      if (!p.success) throw new CorruptLogError(sid, 0, `inbox entry ${id} is unreadable: ${p.error.issues[0]?.message}`);
      return p.data;
    },
    putEntry: (e) => {
      const t = writable();
      const text = JSON.stringify(e);
      dbs.inbox.putSync([e.sessionId, e.entryId], text);
      t.frame?.aux('inbox', [e.sessionId, e.entryId], text);
    },
    writerEpoch: (sid) => log.writerEpoch(sid),
    hasEvent: (sid, id) => log.hasEvent(sid, id),
  };
}

/**
 * The LMDB store's `work`: entries and work rows live in the store's file, written in its write
 * transactions (so a claim across processes is serialised by LMDB's writer lock) and journaled
 * like the log; worker heartbeats are written without the journal (rewritten every few seconds).
 */
export function lmdbWork(
  dbs: WorkDbs,
  store: {
    write<T>(run: (txn: LmdbTxn) => T): Promise<T>;
    head(txn: LmdbTxn | undefined, sid: string): { writerEpoch: number } | undefined;
    hasEvent(txn: LmdbTxn | undefined, sid: string, id: string): boolean;
    assertOpen(): void;
  },
): KvWorkStore {
  const view = (txn: LmdbTxn | undefined) =>
    workTxn(dbs, txn, {
      writerEpoch: (sid) => store.head(txn, sid)?.writerEpoch ?? 0,
      hasEvent: (sid, id) => store.hasEvent(txn, sid, id),
    });
  return new KvWorkStore({
    write: (fn) => store.write((txn) => fn(view(txn))),
    read: (fn) => {
      dbs.env.resetReadTxn(); // another process's writes: a fresh snapshot
      return fn(view(undefined));
    },
    workers: {
      get: (id) => parse<WorkerRow>(dbs.workers.get(id), 'worker row', id),
      put: (w) => void dbs.workers.putSync(w.workerId, JSON.stringify(w)),
      remove: (id) => void dbs.workers.removeSync(id),
      *all() {
        dbs.env.resetReadTxn();
        for (const { key, value } of dbs.workers.getRange()) yield parse<WorkerRow>(value, 'worker row', String(key))!;
      },
    },
    assertOpen: () => store.assertOpen(),
  });
}
