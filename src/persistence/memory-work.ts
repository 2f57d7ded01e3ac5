import type { StoredInboxEntry } from '../contracts/inbox.js';
import { KvWorkStore } from './work-kv.js';
import type { WorkerRow, WorkRow, WorkTxn } from './work-core.js';

/** The memory store's `work`: maps, copied in and out (nothing stored is shared with a caller). */
export function memoryWork(log: {
  writerEpoch(sid: string): number;
  hasEvent(sid: string, id: string): boolean;
  assertOpen(): void;
}): KvWorkStore {
  const rows = new Map<string, WorkRow>();
  const entries = new Map<string, Map<string, StoredInboxEntry>>();
  const workers = new Map<string, WorkerRow>();
  const txn: WorkTxn = {
    work: (sid) => (rows.has(sid) ? structuredClone(rows.get(sid)!) : undefined),
    *allWork() {
      for (const r of [...rows.values()]) yield structuredClone(r);
    },
    putWork: (row) => void rows.set(row.sessionId, structuredClone(row)),
    entry: (sid, id) => {
      const e = entries.get(sid)?.get(id);
      return e && structuredClone(e);
    },
    putEntry: (e) => {
      let m = entries.get(e.sessionId);
      if (!m) entries.set(e.sessionId, (m = new Map()));
      m.set(e.entryId, structuredClone(e));
    },
    writerEpoch: (sid) => log.writerEpoch(sid),
    hasEvent: (sid, id) => log.hasEvent(sid, id),
  };
  return new KvWorkStore(
    {
      write: async (fn) => fn(txn),
      read: (fn) => fn(txn),
      workers: {
        get: (id) => workers.get(id),
        put: (w) => void workers.set(w.workerId, { ...w }),
        remove: (id) => void workers.delete(id),
        all: () => workers.values(),
      },
      assertOpen: () => log.assertOpen(),
    },
    true,
  ); // one process: every submit reaches wakeups$
}
