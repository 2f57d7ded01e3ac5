import { Observable, Subject } from 'rxjs';
import { InboxEntry, InboxOutcome, type LeaseInfo, type StoredInboxEntry, type WorkerInfo } from '../contracts/inbox.js';
import {
  bindLease,
  claimSessions,
  leaseInfo,
  markEntriesApplied,
  pendingEntries,
  releaseLease,
  renewLeases,
  submitEntry,
  workerInfo,
  type WorkerRow,
  type WorkTxn,
} from './work-core.js';
import type { ClaimedSession, SubmitOutcome, WorkerRegistration, WorkStore } from './work-store.js';
import { workArgs } from './work-input.js';

/** How a key-value backend (memory, LMDB) runs work operations. */
export interface WorkBackend {
  /** Runs `fn` in one write transaction (serialised with the store's appends; durable when resolved). */
  write<T>(fn: (t: WorkTxn) => T): Promise<T>;
  /** Runs `fn` on a fresh read view. */
  read<T>(fn: (t: WorkTxn) => T): T;
  /** Worker rows: not part of the log's durable state (a heartbeat is rewritten every few seconds). */
  workers: { get(id: string): WorkerRow | undefined; put(w: WorkerRow): void; remove(id: string): void; all(): Iterable<WorkerRow> };
  assertOpen(): void;
}

/**
 * `store.work` of the memory and LMDB stores: the rules of work-core.ts, each operation one
 * transaction. Wake-ups reach only this process (other processes of an LMDB file poll).
 */
export class KvWorkStore implements WorkStore {
  private readonly wake = new Subject<string>();
  readonly wakeups$: Observable<string> = this.wake.asObservable();

  /** `wakesAcrossProcesses`: no other process can write this store (memory), so every submit wakes. */
  constructor(
    private readonly b: WorkBackend,
    readonly wakesAcrossProcesses = false,
  ) {}

  async submit(sessionId: string, entry: InboxEntry): Promise<SubmitOutcome> {
    this.b.assertOpen();
    const e = workArgs.submit(sessionId, entry);
    const out = await this.b.write((t) => submitEntry(t, sessionId, e, Date.now()));
    if (out.status === 'accepted') this.wake.next(sessionId);
    return out;
  }

  async pending(sessionId: string): Promise<StoredInboxEntry[]> {
    this.b.assertOpen();
    workArgs.pending(sessionId);
    return this.b.read((t) => pendingEntries(t, sessionId));
  }

  async getEntry(sessionId: string, entryId: string): Promise<StoredInboxEntry | undefined> {
    this.b.assertOpen();
    workArgs.getEntry(sessionId, entryId);
    return this.b.read((t) => t.entry(sessionId, entryId));
  }

  async markApplied(sessionId: string, writerEpoch: number, marks: readonly { entryId: string; outcome: InboxOutcome }[]): Promise<void> {
    this.b.assertOpen();
    const m = workArgs.markApplied(sessionId, writerEpoch, marks);
    if (m.length === 0) return;
    await this.b.write((t) => markEntriesApplied(t, sessionId, writerEpoch, m, Date.now()));
  }

  async claim(workerId: string, options: { limit: number; leaseMs: number }): Promise<ClaimedSession[]> {
    this.b.assertOpen();
    const o = workArgs.claim(workerId, options);
    return this.b.write((t) => claimSessions(t, workerId, o.limit, o.leaseMs, Date.now()));
  }

  async bind(sessionId: string, workerId: string, writerEpoch: number, leaseMs: number): Promise<boolean> {
    this.b.assertOpen();
    workArgs.bind(sessionId, workerId, writerEpoch, leaseMs);
    return this.b.write((t) => bindLease(t, sessionId, workerId, writerEpoch, leaseMs, Date.now()));
  }

  async renew(workerId: string, leases: readonly { sessionId: string; writerEpoch: number }[], leaseMs: number): Promise<string[]> {
    this.b.assertOpen();
    const l = workArgs.renew(workerId, leases, leaseMs);
    if (l.length === 0) return [];
    return this.b.write((t) => renewLeases(t, workerId, l, leaseMs, Date.now()));
  }

  async release(sessionId: string, workerId: string, writerEpoch: number | null, options: { resume: boolean }): Promise<void> {
    this.b.assertOpen();
    workArgs.release(sessionId, workerId, writerEpoch, options);
    const released = await this.b.write((t) => {
      const done = releaseLease(t, sessionId, workerId, writerEpoch, options.resume);
      return done && (t.work(sessionId)!.pending.length > 0 || options.resume);
    });
    if (released) this.wake.next(sessionId); // work left behind: another worker may take it now
  }

  async heartbeat(worker: WorkerRegistration, ttlMs: number): Promise<void> {
    this.b.assertOpen();
    const w = workArgs.heartbeat(worker, ttlMs);
    const now = Date.now();
    const known = this.b.workers.get(w.workerId);
    this.b.workers.put({ ...w, startedAt: known?.startedAt ?? now, heartbeatAt: now, ttlMs });
  }

  async removeWorker(workerId: string): Promise<void> {
    this.b.assertOpen();
    workArgs.removeWorker(workerId);
    this.b.workers.remove(workerId);
  }

  async listWorkers(): Promise<WorkerInfo[]> {
    this.b.assertOpen();
    const now = Date.now();
    return [...this.b.workers.all()].map((w) => workerInfo(w, now)).sort((a, b) => a.workerId.localeCompare(b.workerId));
  }

  async listLeases(): Promise<LeaseInfo[]> {
    this.b.assertOpen();
    const now = Date.now();
    return this.b.read((t) =>
      [...t.allWork()].filter((r) => r.workerId !== null || r.pending.length > 0 || r.resume).map((r) => leaseInfo(r, now)),
    );
  }

  /** The store closed. */
  complete(): void {
    this.wake.complete();
  }
}
