import { randomUUID } from 'node:crypto';
import type { Database, RootDatabase } from 'lmdb';
import { judgeHolder, publicHolder, thisProcess, type HolderRecord, type SessionHolder, type SessionHolders } from './holders.js';

/** A holder as the LMDB store records it: the store object that claimed (so a release never removes a later claim). */
interface LmdbHolder extends HolderRecord {
  instance: string;
}

function parseHolder(raw: string | undefined): LmdbHolder | undefined {
  if (raw === undefined) return undefined;
  try {
    const h = JSON.parse(raw) as LmdbHolder;
    return typeof h.host === 'string' && typeof h.pid === 'number' && typeof h.instance === 'string' ? h : undefined;
  } catch {
    return undefined; // unreadable: as if absent (the record is advisory, the writer epoch fences)
  }
}

/**
 * The LMDB store's `holders` (holders.ts): a `holders` database in the store's file, one record per
 * session (host, pid, process start time, worker id), written in transactions of their own (no
 * journal frame: after a restart of the machine every holder is dead, and a rebuild from the
 * journal starts with none). LMDB's writer lock makes each claim atomic across the processes
 * sharing the file, which must share one machine (one pid namespace): a record naming another
 * host is taken as live.
 */
export class LmdbHolders implements SessionHolders {
  private readonly instance = randomUUID();
  private readonly claims = new Map<string, number>();

  constructor(
    private readonly env: RootDatabase,
    private readonly db: Database<string, string>,
    private readonly assertOpen: () => void,
  ) {}

  async claim(sessionId: string, options: { takeover: boolean; workerId?: string }): Promise<SessionHolder | undefined> {
    this.assertOpen();
    let refused: LmdbHolder | undefined;
    this.env.transactionSync(() => {
      const current = parseHolder(this.db.get(sessionId));
      if (current && current.instance !== this.instance && !options.takeover && judgeHolder(current) === 'live') {
        refused = current;
        return;
      }
      const mine: LmdbHolder = {
        ...thisProcess(),
        ...(options.workerId !== undefined ? { workerId: options.workerId } : {}),
        instance: this.instance,
      };
      this.db.putSync(sessionId, JSON.stringify(mine));
    });
    if (refused) return publicHolder(refused);
    this.claims.set(sessionId, (this.claims.get(sessionId) ?? 0) + 1);
    return undefined;
  }

  async holderOf(sessionId: string): Promise<SessionHolder | undefined> {
    this.assertOpen();
    const current = parseHolder(this.db.get(sessionId));
    return current && judgeHolder(current) !== 'dead' ? publicHolder(current) : undefined;
  }

  async release(sessionId: string): Promise<void> {
    const n = (this.claims.get(sessionId) ?? 0) - 1;
    if (n > 0) {
      this.claims.set(sessionId, n);
      return;
    }
    this.claims.delete(sessionId);
    try {
      this.env.transactionSync(() => {
        if (parseHolder(this.db.get(sessionId))?.instance === this.instance) this.db.removeSync(sessionId);
      });
    } catch {
      // the store closed first: the record stays, and names a process that is gone by the next claim
    }
  }
}
