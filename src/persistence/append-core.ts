import { InvariantViolation, SequenceConflictError, StaleWriterError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import { encodeRecord, findEvent, sameContent, toRecord, type PreparedDraft } from './codec.js';
import { advanceHead, newHead, type SessionHead } from './head.js';
import type { AttachResult } from './event-store.js';

/**
 * The storage a backend exposes inside one write transaction. Every method is synchronous:
 * nothing is awaited while a transaction is open (an LMDB write lock is process-wide).
 */
export interface LogTxn {
  head(sessionId: string): SessionHead | undefined;
  /** The index of caller-chosen event ids. */
  seqOfEventId(sessionId: string, eventId: string): number | undefined;
  event(sessionId: string, seq: number): EventRecord;
  putHead(head: SessionHead): void;
  /** Stores `record`, whose JSON text is `text`. */
  putEvent(record: EventRecord, text: string): void;
  putEventId(sessionId: string, eventId: string, seq: number): void;
}

export function applyAttach(txn: LogTxn, sessionId: string): AttachResult {
  const head = txn.head(sessionId) ?? newHead(sessionId);
  const next = { ...head, writerEpoch: head.writerEpoch + 1 };
  txn.putHead(next);
  return { writerEpoch: next.writerEpoch, lastSeq: next.lastSeq, lastTurn: next.lastTurn };
}

/** The shared append algorithm (DESIGN §2): checks in the contract's order, then writes. */
export function applyAppend(
  txn: LogTxn,
  sessionId: string,
  writerEpoch: number,
  expectedSeq: number,
  drafts: readonly PreparedDraft[],
  occurredAt: string,
): { records: EventRecord[]; head: SessionHead; written: boolean; before: SessionHead } {
  const head = txn.head(sessionId) ?? newHead(sessionId);
  if (head.writerEpoch !== writerEpoch) throw new StaleWriterError(sessionId, writerEpoch, head.writerEpoch);

  let stored = 0;
  const storedRecords: EventRecord[] = [];
  const seen = new Set<string>();
  for (const d of drafts) {
    if (!d.callerId) continue; // a generated id is new by construction
    if (seen.has(d.eventId)) throw new InvariantViolation(`eventId ${d.eventId} appears twice in one batch`, { sessionId });
    seen.add(d.eventId);
    const existing = findEvent(
      d.eventId,
      (id) => txn.seqOfEventId(sessionId, id),
      (n, indexed) => (indexed || n <= head.lastSeq ? txn.event(sessionId, n) : undefined),
    );
    if (existing === undefined) continue;
    const seq = existing.seq;
    if (!sameContent(d, existing)) {
      throw new InvariantViolation(`eventId ${d.eventId} is already stored at seq ${seq} with different content`, {
        sessionId,
        seq,
      });
    }
    stored++;
    storedRecords.push(existing);
  }
  if (drafts.length > 0 && stored === drafts.length) return { records: storedRecords, head, written: false, before: head };
  if (stored > 0) {
    throw new InvariantViolation(`batch mixes ${stored} already-stored eventIds with new ones`, { sessionId });
  }
  if (expectedSeq !== head.lastSeq + 1) throw new SequenceConflictError(sessionId, expectedSeq, head.lastSeq + 1);

  const records = drafts.map((d, i) => toRecord(sessionId, expectedSeq + i, writerEpoch, d, occurredAt));
  records.forEach((r, i) => {
    txn.putEvent(r, encodeRecord(r, drafts[i]!.payloadJson));
    if (drafts[i]!.callerId) txn.putEventId(sessionId, r.eventId, r.seq);
  });
  const next = advanceHead(head, records);
  txn.putHead(next);
  return { records, head: next, written: records.length > 0, before: head };
}
