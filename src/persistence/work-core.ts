import { StaleWriterError } from '../contracts/errors.js';
import {
  entryIdOf,
  type InboxEntry,
  type InboxOutcome,
  type LeaseInfo,
  type StoredInboxEntry,
  type WorkerInfo,
} from '../contracts/inbox.js';
import { canonicalJson } from './codec.js';
import type { ClaimedSession, SubmitOutcome, WorkerRegistration } from './work-store.js';

/** A session's work row: inbox counters, pending entry ids, and its lease. Times in ms since the epoch. */
export interface WorkRow {
  sessionId: string;
  inboxSeq: number;
  appliedSeq: number;
  /** Ids of entries submitted and not yet applied, in submit order. */
  pending: string[];
  workerId: string | null;
  writerEpoch: number | null;
  leaseUntil: number | null;
  resume: boolean;
}

export interface WorkerRow extends WorkerRegistration {
  startedAt: number;
  heartbeatAt: number;
  ttlMs: number;
}

/**
 * The storage a memory or LMDB backend exposes inside one write transaction (synchronous, as
 * LogTxn). PostgreSQL runs the same rules as SQL (postgres/work.ts).
 */
export interface WorkTxn {
  work(sessionId: string): WorkRow | undefined;
  allWork(): Iterable<WorkRow>;
  putWork(row: WorkRow): void;
  entry(sessionId: string, entryId: string): StoredInboxEntry | undefined;
  putEntry(entry: StoredInboxEntry): void;
  /** The session's current writer epoch (0: never attached). */
  writerEpoch(sessionId: string): number;
  /** The log holds an event with this id. */
  hasEvent(sessionId: string, eventId: string): boolean;
}

export const newWorkRow = (sessionId: string): WorkRow => ({
  sessionId,
  inboxSeq: 0,
  appliedSeq: 0,
  pending: [],
  workerId: null,
  writerEpoch: null,
  leaseUntil: null,
  resume: false,
});

/** The reason an entry with a used id is refused, or undefined when it is the same entry. */
export function sameEntryOrReason(stored: InboxEntry, entry: InboxEntry): string | undefined {
  if (canonicalJson(stored) === canonicalJson(entry)) return undefined;
  return `${entry.kind === 'input' ? 'inputId' : 'entryId'} ${entryIdOf(entry)} was already used for a different ${stored.kind} entry`;
}

export function submitEntry(t: WorkTxn, sessionId: string, entry: InboxEntry, now: number): SubmitOutcome {
  const entryId = entryIdOf(entry);
  const stored = t.entry(sessionId, entryId);
  if (stored) {
    const reason = sameEntryOrReason(stored.entry, entry);
    return reason ? { status: 'refused', reason } : { status: 'already_accepted' };
  }
  // an input the session's writer accepted in-process: already in the log
  if (entry.kind === 'input' && t.hasEvent(sessionId, `input:${entry.inputId}`))
    return { status: 'already_accepted', reason: 'the session log already holds this input' };
  const row = t.work(sessionId) ?? newWorkRow(sessionId);
  const seq = row.inboxSeq + 1;
  t.putEntry({ sessionId, entryId, seq, entry, submittedAt: new Date(now).toISOString() });
  t.putWork({ ...row, inboxSeq: seq, pending: [...row.pending, entryId] });
  return { status: 'accepted' };
}

export function pendingEntries(t: Pick<WorkTxn, 'work' | 'entry'>, sessionId: string): StoredInboxEntry[] {
  const row = t.work(sessionId);
  if (!row) return [];
  return row.pending.map((id) => t.entry(sessionId, id)).filter((e): e is StoredInboxEntry => e !== undefined && e.applied === undefined);
}

export function markEntriesApplied(
  t: WorkTxn,
  sessionId: string,
  writerEpoch: number,
  marks: readonly { entryId: string; outcome: InboxOutcome }[],
  now: number,
): void {
  const current = t.writerEpoch(sessionId);
  if (current !== writerEpoch) throw new StaleWriterError(sessionId, writerEpoch, current);
  const row = t.work(sessionId);
  if (!row) return;
  const done = new Set<string>();
  let appliedSeq = row.appliedSeq;
  for (const m of marks) {
    const e = t.entry(sessionId, m.entryId);
    if (!e || e.applied) continue;
    t.putEntry({ ...e, applied: { writerEpoch, at: new Date(now).toISOString(), outcome: m.outcome } });
    done.add(m.entryId);
    appliedSeq = Math.max(appliedSeq, e.seq);
  }
  if (done.size > 0) t.putWork({ ...row, appliedSeq, pending: row.pending.filter((id) => !done.has(id)) });
}

const leaseLive = (r: WorkRow, now: number) => r.workerId !== null && r.leaseUntil !== null && r.leaseUntil >= now;

/** Work to do: entries pending or a run to resume, with no live lease; or a lease that expired. */
export const hasWork = (r: WorkRow, now: number): boolean =>
  !leaseLive(r, now) && (r.pending.length > 0 || r.resume || r.workerId !== null);

export function claimSessions(t: WorkTxn, workerId: string, limit: number, leaseMs: number, now: number): ClaimedSession[] {
  const claimed: ClaimedSession[] = [];
  for (const r of t.allWork()) {
    if (claimed.length >= limit) break;
    if (!hasWork(r, now)) continue;
    const previous = r.workerId;
    t.putWork({ ...r, workerId, writerEpoch: null, leaseUntil: now + leaseMs, resume: false });
    claimed.push({ sessionId: r.sessionId, expired: previous !== null, ...(previous !== null ? { previousOwner: previous } : {}) });
  }
  return claimed;
}

export function bindLease(t: WorkTxn, sessionId: string, workerId: string, writerEpoch: number, leaseMs: number, now: number): boolean {
  const r = t.work(sessionId);
  if (!r || r.workerId !== workerId || !leaseLive(r, now) || t.writerEpoch(sessionId) !== writerEpoch) return false;
  t.putWork({ ...r, writerEpoch, leaseUntil: now + leaseMs });
  return true;
}

export function renewLeases(
  t: WorkTxn,
  workerId: string,
  leases: readonly { sessionId: string; writerEpoch: number }[],
  leaseMs: number,
  now: number,
): string[] {
  const held: string[] = [];
  for (const l of leases) {
    const r = t.work(l.sessionId);
    if (
      !r ||
      r.workerId !== workerId ||
      r.writerEpoch !== l.writerEpoch ||
      !leaseLive(r, now) ||
      t.writerEpoch(l.sessionId) !== l.writerEpoch
    )
      continue;
    t.putWork({ ...r, leaseUntil: now + leaseMs });
    held.push(l.sessionId);
  }
  return held;
}

export function releaseLease(t: WorkTxn, sessionId: string, workerId: string, writerEpoch: number | null, resume: boolean): boolean {
  const r = t.work(sessionId);
  if (!r || r.workerId !== workerId) return false;
  // a release naming its epoch frees only the lease bound to it: an unbound row is a newer claim
  // of this worker (a claim unbinds), whose run would otherwise be left to no one
  if (writerEpoch !== null && r.writerEpoch !== writerEpoch) return false;
  t.putWork({ ...r, workerId: null, writerEpoch: null, leaseUntil: null, resume: resume || r.resume });
  return true;
}

export function leaseInfo(r: WorkRow, now: number): LeaseInfo {
  return {
    sessionId: r.sessionId,
    workerId: r.workerId,
    writerEpoch: r.writerEpoch,
    leaseUntil: r.leaseUntil === null ? null : new Date(r.leaseUntil).toISOString(),
    expired: r.workerId !== null && !leaseLive(r, now),
    inboxSeq: r.inboxSeq,
    appliedSeq: r.appliedSeq,
    resume: r.resume,
  };
}

export function workerInfo(w: WorkerRow, now: number): WorkerInfo {
  return {
    workerId: w.workerId,
    host: w.host,
    pid: w.pid,
    concurrency: w.concurrency,
    startedAt: new Date(w.startedAt).toISOString(),
    heartbeatAt: new Date(w.heartbeatAt).toISOString(),
    live: w.heartbeatAt + w.ttlMs >= now,
  };
}
