import type { Observable } from 'rxjs';
import type { InboxEntry, InboxOutcome, LeaseInfo, StoredInboxEntry, WorkerInfo } from '../contracts/inbox.js';

/** What `submit` found: stored now, stored before (same content), or refused with the reason. */
export interface SubmitOutcome {
  status: 'accepted' | 'already_accepted' | 'refused';
  reason?: string;
}

/** A session a worker has just claimed. */
export interface ClaimedSession {
  sessionId: string;
  /** The worker whose lease it took over (it expired), if any. */
  previousOwner?: string;
  expired: boolean;
}

/** A serving worker, as it registers itself (and heartbeats). */
export interface WorkerRegistration {
  workerId: string;
  host: string;
  pid: number;
  concurrency: number;
}

/**
 * The inbox and the leases of a store (DESIGN §8, docs/scale-out.md): what any process may write
 * without being a session's writer (the inbox), and how serving workers share sessions (leases
 * bound to the session's writer epoch, the fencing token). Every backend's `store.work` passes
 * `test/conformance/work-store.contract.ts`. Times are the store's clock (PostgreSQL's `now()`,
 * the machine's clock for LMDB and memory).
 * @example
 * const outcome = await store.work!.submit('s1', { kind: 'cancel', entryId: 'c1' })
 */
export interface WorkStore {
  /** Stores an entry durably (idempotent by its id); never touches the session's log or epoch. */
  submit(sessionId: string, entry: InboxEntry): Promise<SubmitOutcome>;
  /** Entries not yet applied, in submit order. */
  pending(sessionId: string): Promise<StoredInboxEntry[]>;
  getEntry(sessionId: string, entryId: string): Promise<StoredInboxEntry | undefined>;
  /**
   * Records entries as applied by the writer of `writerEpoch`.
   * Contract: throws StaleWriterError when that epoch is not the session's current one (nothing recorded).
   */
  markApplied(sessionId: string, writerEpoch: number, marks: readonly { entryId: string; outcome: InboxOutcome }[]): Promise<void>;
  /**
   * Claims up to `limit` sessions with work and no live lease — entries pending, a run left to
   * resume, or a lease that expired (its worker died or paused) — for `leaseMs`. Claims skip rows
   * another claim holds (PostgreSQL: FOR UPDATE SKIP LOCKED).
   */
  claim(workerId: string, options: { limit: number; leaseMs: number }): Promise<ClaimedSession[]>;
  /** Binds a claim to the writer epoch its owner attached with; false if the claim was lost meanwhile. */
  bind(sessionId: string, workerId: string, writerEpoch: number, leaseMs: number): Promise<boolean>;
  /**
   * Renews leases that are unexpired, still this worker's and whose epoch is the session's current
   * writer epoch; returns the session ids renewed (the others are lost).
   */
  renew(workerId: string, leases: readonly { sessionId: string; writerEpoch: number }[], leaseMs: number): Promise<string[]>;
  /**
   * Gives a lease up, only this worker's: one naming `writerEpoch` frees only the lease bound to
   * that epoch (never a newer claim, not yet bound); `null` frees this worker's claim, bound or not.
   * `resume`: a run is left open for the next worker.
   */
  release(sessionId: string, workerId: string, writerEpoch: number | null, options: { resume: boolean }): Promise<void>;
  /** Registers or heartbeats a worker; it counts as live for `ttlMs`. */
  heartbeat(worker: WorkerRegistration, ttlMs: number): Promise<void>;
  removeWorker(workerId: string): Promise<void>;
  listWorkers(): Promise<WorkerInfo[]>;
  /** Every session with a lease or inbox entries. */
  listLeases(): Promise<LeaseInfo[]>;
  /** Best-effort wake-ups: session ids with new entries or released with work (polling is the fallback). */
  readonly wakeups$: Observable<string>;
  /** `wakeups$` reports other processes' submits too (PostgreSQL's NOTIFY), so held sessions need polling only as a rare fallback. */
  readonly wakesAcrossProcesses: boolean;
}
